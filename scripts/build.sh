#!/usr/bin/env bash
# build.sh [release|asan|prod] - configures and builds:
#   release  build/       the test build (test hooks on, KW_TESTCTL): what scripts/test.sh runs
#   asan     build-asan/  the same under AddressSanitizer + UBSan
#   prod     build-run/   the production binary scripts/run.sh serves with: no test hooks
#                         (-DKW_TESTCTL=OFF: no test flag, no stub engine, no fault injection);
#                         only the kvwise binary is built (`cd build-run && ctest` checks that)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-release}
targets=()
case "$mode" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKW_SANITIZE=ON) ;;
  prod)    dir=build-run; flags=(-DCMAKE_BUILD_TYPE=Release -DKW_TESTCTL=OFF -DKW_SHARED=OFF); targets=(--target kvwise) ;;
  *) echo "usage: build.sh [release|asan|prod]" >&2; exit 2 ;;
esac
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# Configure when there is no build system yet: also after a configure that failed half way
# (say, before install-deps.sh ran), which leaves a CMakeCache.txt but no build files.
if [ ! -f "$dir/build.ninja" ] && [ ! -f "$dir/Makefile" ]; then
  cmake -S . -B "$dir" "${gen[@]}" "${flags[@]}" >/dev/null
fi
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
