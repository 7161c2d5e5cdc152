#!/usr/bin/env bash
# install.sh - installs the npm packages these tests use into
# tests/node/node_modules (ignored by git). Idempotent: does nothing when
# they are present. Exits 77 (CTest "skipped") if the registry is unreachable.
set -u
cd "$(dirname "$0")"
[ -f node_modules/openai/package.json ] && exit 0
command -v npm >/dev/null || { echo "npm missing: skip"; exit 77; }
if ! timeout 300 npm install --no-audit --no-fund --loglevel=error >/dev/null 2>npm-install.log; then
  echo "npm install failed (registry unreachable?): skip"; cat npm-install.log; exit 77
fi
rm -f npm-install.log
