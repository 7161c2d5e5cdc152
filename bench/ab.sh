#!/usr/bin/env bash
# ab.sh - two (or more) git revisions of kvwise compared inside one process.
#
#   bench/ab.sh REV REV [REV ...] -- -m MODEL [-n 16] [-s 120] [-d DEPTH] [-p N] [--same]
#
# Each REV (a commit, branch or tag; `.` = this working tree as built in
# build/) is exported with `git archive` to /tmp/kvwise-ab/<commit>/ and
# its libkvwise.so built there (kept for the next run; any revision with
# the kvwise_lib target works); then this tree's
# bench_ab loads them all and alternates bursts of the same work between
# them (see bench/bench_ab.c for what it reports). Example, a change against
# its parent: bench/ab.sh HEAD~1 HEAD -- -m 1b-q8_0.gguf -s 120 --same
set -euo pipefail
cd "$(dirname "$0")/.."
revs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do revs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ ${#revs[@]} -lt 2 ] || [ $# -eq 0 ]; then
  echo "usage: bench/ab.sh REV REV [REV ...] -- -m MODEL [bench_ab options]" >&2; exit 2
fi
scripts/build.sh release >/dev/null
libs=()
for r in "${revs[@]}"; do
  if [ "$r" = . ]; then libs+=("$PWD/build/libkvwise.so"); continue; fi
  c=$(git rev-parse --verify --short=12 "$r^{commit}") || { echo "ab.sh: no revision $r" >&2; exit 2; }
  d=/tmp/kvwise-ab/$c
  if [ ! -f "$d/build/libkvwise.so" ]; then
    rm -rf "$d" && mkdir -p "$d"
    git archive "$c" | tar -x -C "$d"
    echo "building $r ($c) in $d ..." >&2
    # the static library as position-independent code, linked whole into a
    # shared one: works for revisions from before the KW_SHARED option too
    cmake -S "$d" -B "$d/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DKW_SHARED=OFF >/dev/null
    cmake --build "$d/build" --target kvwise_lib -j "$(nproc)" >/dev/null
    cc -shared -o "$d/build/libkvwise.so" -Wl,--whole-archive "$d/build/libkvwise.a" -Wl,--no-whole-archive \
       -Wl,-Bsymbolic $(pkg-config --libs libpcre2-8 libmicrohttpd libcjson) -lm -lpthread
  fi
  libs+=("$d/build/libkvwise.so")
done
exec build/bench/bench_ab "$@" "${libs[@]}"
