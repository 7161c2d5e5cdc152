#!/usr/bin/env bash
# setup.sh [DIR] - installs OpenCode (npm `opencode-ai`, pinned) into DIR
# (default: tests/opencode/npm, git-ignored) for the OpenCode end-to-end
# test. The package ships a prebuilt binary per platform (optional
# dependencies), so this is one download of ~180 MB on the first run and
# nothing afterwards. Idempotent: does nothing when the pinned version is
# there. Exits 77 when npm is unavailable or the registry cannot be reached
# (the test is then skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/npm}
pkgs=("opencode-ai@1.18.33")
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "setup.sh: npm/node not found: OpenCode e2e test skipped" >&2
  exit 77
fi
stamp="$dir/.installed"
want="${pkgs[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/node_modules/.bin/opencode" ]; then
  exit 0
fi
mkdir -p "$dir"
if ! timeout 600 npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${pkgs[@]}" >"$dir/npm.log" 2>&1; then
  echo "setup.sh: npm install opencode-ai failed (no registry access?): OpenCode e2e test skipped; see $dir/npm.log" >&2
  exit 77
fi
if ! "$dir/node_modules/.bin/opencode" --version >/dev/null 2>&1; then
  echo "setup.sh: opencode-ai installed but its binary does not run on this platform: OpenCode e2e test skipped" >&2
  exit 77
fi
echo "$want" >"$stamp"
