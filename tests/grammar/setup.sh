#!/usr/bin/env bash
# setup.sh [DIR] - installs ajv (pinned) into DIR (default: tests/grammar/npm,
# git-ignored) for tools.mjs, which validates generated tool-call arguments
# against their JSON Schemas with it. Idempotent; exits 77 when npm or the
# registry is unavailable (the test then says skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/npm}
bash "$here/../npm_pinned.sh" "$dir" "tool-call schema validation (ajv)" 300 "ajv@8.20.0"
