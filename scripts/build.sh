#!/usr/bin/env bash
# build.sh [release|asan] - configures and builds into build/ or build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-release}
case "$mode" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKW_SANITIZE=ON) ;;
  *) echo "usage: build.sh [release|asan]" >&2; exit 2 ;;
esac
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# Configure when there is no build system yet: also after a configure that failed half way
# (say, before install-deps.sh ran), which leaves a CMakeCache.txt but no build files.
if [ ! -f "$dir/build.ninja" ] && [ ! -f "$dir/Makefile" ]; then
  cmake -S . -B "$dir" "${gen[@]}" "${flags[@]}" >/dev/null
fi
cmake --build "$dir" -j "$(nproc)"
