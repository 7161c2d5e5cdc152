#!/usr/bin/env bash
# setup.sh [DIR] - installs ajv and ajv-formats (pinned) into DIR (default:
# tests/grammar/npm, git-ignored) for tools.mjs and corpus.mjs, which validate
# generated tool-call arguments and structured answers against their JSON
# Schemas with it. Idempotent; exits 77 when npm or the
# registry is unavailable (the test then says skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/npm}
bash "$here/../npm_pinned.sh" "$dir" "schema validation (ajv, ajv-formats, ajv-draft-04)" 300 "ajv@8.20.0" "ajv-formats@3.0.1" "ajv-draft-04@1.0.0"
