#!/usr/bin/env bash
# test_bench_ab.sh - bench/bench_ab.c on the tiny random model: the same
# libkvwise.so loaded twice runs alternating decode and prefill bursts,
# reports both variants with positive rates, finds their logits identical
# (so each copy computes independently and deterministically), and bad usage
# or a library that is not libkvwise exits non-zero with a message.
set -u
BIN=${KW_BIN:?KW_BIN not set}
AB=${KW_AB:?KW_AB not set}
LIB=${KW_SHARED_LIB:?KW_SHARED_LIB not set}
fail=0; pass=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

"$BIN" mkmodel -q --preset tiny --type q8_0 -o "$tmp/t.gguf" || { echo "mkmodel failed"; exit 1; }
out=$("$AB" -m "$tmp/t.gguf" -t 2 -n 4 -s 0.5 --same "$LIB" "$LIB" 2>&1); rc=$?
echo "$out"
check "decode exit 0" '[ $rc -eq 0 ]'
check "two variant lines" '[ "$(grep -c "^\[[01]\] " <<<"$out")" = 2 ]'
check "rates positive" '! grep "^\[[01]\] " <<<"$out" | grep -q " 0.00 tok/s"'
check "variant 0 against itself is 1.000x" 'grep -q "^\[0\] .* median 1.000x" <<<"$out"'
check "logits identical" 'grep -q "identical in every variant" <<<"$out"'
out=$("$AB" -m "$tmp/t.gguf" -t 1 -p 24 -d 8 -s 0.3 "$LIB" "$LIB" "$LIB" 2>&1); rc=$?
check "prefill, three variants, exit 0" '[ $rc -eq 0 ] && [ "$(grep -c "^\[[012]\] " <<<"$out")" = 3 ]'
check "prefill mode named" 'grep -q "prefill 24 tokens" <<<"$out"'
"$AB" -m "$tmp/t.gguf" "$LIB" >/dev/null 2>"$tmp/e"; rc=$?
check "one library: usage, exit 2" '[ $rc -eq 2 ] && grep -q usage "$tmp/e"'
"$AB" -m "$tmp/t.gguf" -s 0.2 "$LIB" /etc/hostname >/dev/null 2>"$tmp/e"; rc=$?
check "not a library: exit 1 with the reason" '[ $rc -eq 1 ] && grep -q "/etc/hostname" "$tmp/e"'
"$AB" -m "$tmp/none.gguf" -s 0.2 "$LIB" "$LIB" >/dev/null 2>"$tmp/e"; rc=$?
check "missing model: exit 1 with the reason" '[ $rc -eq 1 ] && [ -s "$tmp/e" ]'
echo "test_bench_ab: $pass passed, $fail failed"
[ $fail -eq 0 ]
