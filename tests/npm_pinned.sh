#!/usr/bin/env bash
# npm_pinned.sh DIR WHAT SECONDS PKG@VERSION... - installs pinned npm packages
# into DIR for a test's setup.sh (tests/hfimport, tests/template,
# tests/opencode). Idempotent: does nothing when DIR/.installed names exactly
# these packages. Exits 77 (the caller's test is then skipped, saying WHAT)
# when npm/node are missing or the registry cannot be reached within
# SECONDS; the npm output is kept in DIR/npm.log.
set -euo pipefail
dir=$1 what=$2 secs=$3
shift 3
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "setup.sh: npm/node not found: $what skipped" >&2
  exit 77
fi
stamp="$dir/.installed"
want="$*"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
mkdir -p "$dir"
if ! timeout "$secs" npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$@" >"$dir/npm.log" 2>&1; then
  echo "setup.sh: npm install $want failed (no registry access?): $what skipped; see $dir/npm.log" >&2
  exit 77
fi
echo "$want" >"$stamp"
