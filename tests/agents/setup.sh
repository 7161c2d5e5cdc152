#!/usr/bin/env bash
# setup.sh [DIR] - installs the agent clients the tests in this folder drive,
# pinned, into DIR (default: tests/agents/npm, git-ignored), with one npm
# install: Claude Code, Codex and Qwen Code (each ships its binary or bundle
# inside its npm package), pi, the `ollama` JS library and the official
# `openai` and `@anthropic-ai/sdk` SDKs. About 1.2 GB once, nothing
# afterwards. Idempotent: does nothing when these versions are there. Exits
# 77 when npm is unavailable or the registry cannot be reached (the tests
# are then skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/npm}
# a stamp without the binaries (a half-removed install) means: install again
for b in claude codex qwen pi; do [ -x "$dir/node_modules/.bin/$b" ] || rm -f "$dir/.installed"; done
bash "$here/../npm_pinned.sh" "$dir" "agent client e2e tests" 900 \
  "@anthropic-ai/claude-code@2.1.332" "@openai/codex@0.171.0" "@qwen-code/qwen-code@0.24.4" \
  "@mariozechner/pi-coding-agent@0.73.1" "ollama@0.6.4" "openai@6.49.0" "@anthropic-ai/sdk@1.16.0"
