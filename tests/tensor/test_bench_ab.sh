#!/usr/bin/env bash
# test_bench_ab.sh - bench/bench_ab.c on the tiny random model: the same
# libkvwise.so loaded twice runs alternating decode and prefill bursts,
# reports both variants with positive rates, finds their logits identical
# (so each copy computes independently and deterministically), and bad usage
# or a library that is not libkvwise exits non-zero with a message; knob
# variants (LIB@VALUE) of one build share a copy and need kw_ab_knob.
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
# LIB@VALUE: a plain build has no kw_ab_knob, which is an error; a build
# that defines it (here a wrapper library over LIB) runs knob variants that
# share one copy and one model and, the knob being unread, compute alike.
"$AB" -m "$tmp/t.gguf" -s 0.2 "$LIB@1" "$LIB" >/dev/null 2>"$tmp/e"; rc=$?
check "knob on a plain build: exit 1, names the symbol" '[ $rc -eq 1 ] && grep -q "kw_ab_knob" "$tmp/e"'
if printf 'int kw_ab_knob;\n' > "$tmp/knob.c" && cc -shared -fPIC -o "$tmp/knob.so" "$tmp/knob.c" -Wl,--no-as-needed "$LIB" -Wl,-rpath,"$(dirname "$LIB")" 2>"$tmp/e"; then
  out=$("$AB" -m "$tmp/t.gguf" -t 1 -n 2 -s 0.3 --same "$tmp/knob.so@0" "$tmp/knob.so@7" "$tmp/knob.so@0" 2>&1); rc=$?
  echo "$out"
  check "knob variants: exit 0, three lines" '[ $rc -eq 0 ] && [ "$(grep -c "^\[[012]\] .*tok/s" <<<"$out")" = 3 ]'
  check "knob variants share the first copy" 'grep -q "^\[1\] shares the library copy and the model of \[0\]" <<<"$out" && grep -q "^\[2\] shares .* of \[0\]" <<<"$out"'
  check "knob variants: logits identical" 'grep -q "identical in every variant" <<<"$out"'
else
  echo "no C compiler for the knob wrapper: $(cat "$tmp/e")"; fail=$((fail+1))
fi
echo "test_bench_ab: $pass passed, $fail failed"
[ $fail -eq 0 ]
