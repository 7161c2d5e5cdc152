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
# a stamp without a runnable binary (a half-removed install) means: install again
[ -x "$dir/node_modules/.bin/opencode" ] || rm -f "$dir/.installed"
bash "$here/../npm_pinned.sh" "$dir" "OpenCode e2e test" 600 "opencode-ai@1.18.33"
if ! "$dir/node_modules/.bin/opencode" --version >/dev/null 2>&1; then
  echo "setup.sh: opencode-ai installed but its binary does not run on this platform: OpenCode e2e test skipped" >&2
  exit 77
fi
