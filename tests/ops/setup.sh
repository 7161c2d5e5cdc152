#!/usr/bin/env bash
# setup.sh [DIR] - installs playwright-core (pinned; the driver only: it
# downloads no browser, the test drives Debian's /usr/bin/chromium) into DIR
# (default: tests/ops/npm, git-ignored). Idempotent; exits 77 when npm is
# unavailable or the registry cannot be reached (the test then says skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/npm}
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 bash "$here/../npm_pinned.sh" "$dir" "memory page (headless Chromium)" 300 "playwright-core@1.65.2"
