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
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S . -B "$dir" "${gen[@]}" "${flags[@]}" >/dev/null
fi
cmake --build "$dir" -j "$(nproc)"
