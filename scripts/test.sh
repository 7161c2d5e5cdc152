#!/usr/bin/env bash
# test.sh - the whole test suite: installs deps, builds, runs every CTest
# suite in the release build, then every suite again under ASan+UBSan (the
# e2e memory tests skip their RSS/VmHWM bounds there: ASan's shadow memory
# and quarantine are outside any budget). Exits non-zero on any failure.
# e2e_memory_load is left out of the ASan pass: under ASan it skips the
# RSS bounds it exists for, and the server paths it drives run under ASan
# in e2e_server, e2e_memory_multiturn and reliability_wall (CI budget: 15
# minutes on 2 cores). e2e_memory_agent_hybrid is left out of it too (51 s
# there, the longest test of the pass): the hybrid model's prompt cache,
# checkpoints and branch resume run under ASan in e2e_memory_multiturn's
# hybrid part and test_state_cache, its timing bounds need the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
(cd build && ctest --output-on-failure -j 2 --timeout 600)
scripts/build.sh asan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j 2 --timeout 900 -E '^(e2e_memory_load|e2e_memory_agent_hybrid)$')
# libFuzzer smoke run of every fuzz/fuzz_*.c target (clang, ASan+UBSan), 6 s each by default (CI budget).
scripts/fuzz.sh --smoke "${KW_FUZZ_SECONDS:-6}"
