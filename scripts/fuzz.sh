#!/usr/bin/env bash
# fuzz.sh [--smoke SECONDS] [TARGET...] - builds every fuzz/fuzz_<name>.c
# with clang + libFuzzer + ASan/UBSan in build-fuzz/ and runs each target
# for SECONDS (default 60) starting from its seed corpus fuzz/corpus/<name>/
# (the seeds are copied to fuzz/corpus-run/<name>/, which is ignored by git,
# so new inputs found never dirty the tree). A crash stops the script with
# the reproducer in build-fuzz/artifacts/. TARGET limits the run (e.g. gguf).
# A target whose source says "fuzz-smoke-seconds: N" (a small parser that
# needs less) runs at most N seconds in a --smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=60
smoke=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) secs=${2:?--smoke needs SECONDS}; smoke=1; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.c; do [ -e "$f" ] && targets+=("$(basename "$f" .c | sed 's/^fuzz_//')"); done
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: no fuzz/fuzz_*.c targets"; exit 0; }
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  # Werror off: clang may warn where gcc (the main build's compiler) does not.
  CC=clang cmake -S . -B build-fuzz "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKW_FUZZ=ON \
    -DKW_SANITIZE=ON -DKW_WERROR=OFF -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null
fi
cmake --build build-fuzz -j 2 --target "${targets[@]/#/fuzz_}"
mkdir -p build-fuzz/artifacts
for t in "${targets[@]}"; do
  run=fuzz/corpus-run/$t
  mkdir -p "$run"
  [ -d "fuzz/corpus/$t" ] && cp -n fuzz/corpus/$t/* "$run/" 2>/dev/null || true
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  tsecs=$secs
  cap=$(grep -oE 'fuzz-smoke-seconds: [0-9]+' "fuzz/fuzz_$t.c" | grep -oE '[0-9]+' || true)
  [ "$smoke" = 1 ] && [ -n "$cap" ] && [ "$cap" -lt "$secs" ] && tsecs=$cap
  echo "fuzz.sh: fuzz_$t for ${tsecs}s"
  log=build-fuzz/artifacts/$t.log
  rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/fuzz_$t" "$run" "${dict[@]}" -max_total_time="$tsecs" -max_len=65536 -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$t"- >"$log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then
    tail -n 60 "$log" >&2
    echo "fuzz.sh: fuzz_$t FAILED (exit $rc; reproducer in build-fuzz/artifacts/, log $log)" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^#[0-9]+ +DONE" "$log" | sed "s/^/  /" || true
done
echo "fuzz.sh: all targets ran ${secs}s without a finding"
