#!/usr/bin/env bash
# test_bench_cli.sh - `kvwise bench` end to end on the tiny random model:
# the JSON report has the figures it promises (positive rates, a ceiling
# and a percentage consistent with them), the text report prints, and bad
# usage exits 2 with a message.
set -u
BIN=${KW_BIN:?KW_BIN not set}
fail=0; pass=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
j() { node -e "const j=JSON.parse(require('fs').readFileSync(0,'utf8')); process.stdout.write(String($1))"; }

"$BIN" mkmodel -q --preset tiny --type q4_0 -o "$tmp/t.gguf" || { echo "mkmodel failed"; exit 1; }
out=$("$BIN" bench -m "$tmp/t.gguf" -p 16 -n 4 -t 2 -r 2 --json 2>/dev/null); rc=$?
check "json exit 0" '[ $rc -eq 0 ]'
check "rates positive" '[ "$(j "j.pp_tok_s.median>0 && j.tg_tok_s.median>0 && j.bandwidth_bytes_s.median>1e8" <<<"$out")" = true ]'
check "min <= median <= max" '[ "$(j "j.tg_tok_s.min<=j.tg_tok_s.median && j.tg_tok_s.median<=j.tg_tok_s.max" <<<"$out")" = true ]'
check "bandwidth from the weights' pages, the 256 MiB buffer beside it" '[ "$(j "j.bandwidth_source === \"weights\" && j.probe_buffer_bytes_s.median>1e8" <<<"$out")" = true ]'
check "ceiling = bw / bytes" '[ "$(j "Math.abs(j.tg_ceiling_tok_s - j.bandwidth_bytes_s.median/j.decode_bytes_per_token) < 1e-6*j.tg_ceiling_tok_s" <<<"$out")" = true ]'
check "pct consistent" '[ "$(j "Math.abs(j.tg_pct_of_ceiling - 100*j.tg_tok_s.median/j.tg_ceiling_tok_s) < 1e-6" <<<"$out")" = true ]'
check "bytes <= weights" '[ "$(j "j.weight_bytes_per_token>0 && j.weight_bytes_per_token<=j.weight_bytes" <<<"$out")" = true ]'
check "decode bytes = weights + KV" '[ "$(j "j.kv_bytes_per_token>0 && j.decode_bytes_per_token==j.weight_bytes_per_token+j.kv_bytes_per_token" <<<"$out")" = true ]'
check "fields" '[ "$(j "[j.n_prompt,j.n_gen,j.threads,j.repetitions].join()" <<<"$out")" = "16,4,2,2" ]'
out=$(KW_DECODE_PREFETCH=2048 "$BIN" bench -m "$tmp/t.gguf" -p 0 -n 2 -t 1 -r 1 --json 2>/dev/null)
check "decode prefetch reported, KW_DECODE_PREFETCH honoured" '[ "$(j "j.decode_prefetch_bytes" <<<"$out")" = 2048 ]'
out=$("$BIN" bench -m "$tmp/t.gguf" -p 8 -n 4 -d 40 --batch 3 -t 2 -r 2 --json 2>/dev/null); rc=$?
check "depth+batch exit 0" '[ $rc -eq 0 ]'
check "depth+batch fields" '[ "$(j "[j.n_depth,j.batch].join()" <<<"$out")" = "40,3" ]'
check "default kv type resolved (auto -> i16 or f16)" '[ "$(j "j.kv_type" <<<"$out")" = i16 ] || [ "$(j "j.kv_type" <<<"$out")" = f16 ]'
# the ratio is the median of per-repetition ratios tg_i / tg0_i, so it lies
# between min(tg) / max(tg0) and max(tg) / min(tg0) whatever the timings
# (a fixed upper bound such as 10 was a timing bound: a millisecond stall in
# one 4-token depth-0 repetition of this tiny model broke it in CI)
check "depth: tg at d0 in the same repetitions, and the ratio" '[ "$(j "j.tg_depth0_tok_s.median>0 && j.tg_depth_ratio>0 && j.tg_depth_ratio >= j.tg_tok_s.min/j.tg_depth0_tok_s.max*(1-1e-9) && j.tg_depth_ratio <= j.tg_tok_s.max/j.tg_depth0_tok_s.min*(1+1e-9)" <<<"$out")" = true ]'
# the bound: bytes read per token at d0 over those at d40, KV averaged over the
# 4 steps (d + 2.5 positions against 2.5), from the JSON's own byte counts
check "depth ratio bound = (W + KV0) / (W + KVd), below 1" '[ "$(j "Math.abs(j.tg_depth_ratio_bound - (j.weight_bytes_per_token + j.kv_bytes_per_token*2.5/42.5)/(j.weight_bytes_per_token + j.kv_bytes_per_token)) < 1e-6 && j.tg_depth_ratio_bound < 1" <<<"$out")" = true ]'
check "batch rate and ratio" '[ "$(j "j.batch_tok_s.median>0 && j.batch_tok_s.min<=j.batch_tok_s.median && j.batch_ratio_to_tg>0" <<<"$out")" = true ]'
check "dense weights: a batched step reads what one token does, so the bytes bound is the batch size" '[ "$(j "j.batch_step_weight_bytes_counted>0 && Math.abs(j.batch_ratio_bytes_bound-3)<1e-6" <<<"$out")" = true ]'
kv40=$(j "j.kv_bytes_per_token" <<<"$out")
out=$("$BIN" bench -m "$tmp/t.gguf" -p 0 -n 4 -d 80 -t 1 -r 1 --json 2>/dev/null)
check "KV bytes grow with depth (avg positions 42.5 -> 82.5)" '[ "$(j "Math.abs(j.kv_bytes_per_token/$kv40 - 82.5/42.5) < 1e-3" <<<"$out")" = true ]'
out=$("$BIN" bench -m "$tmp/t.gguf" -p 0 -n 2 -r 1 -t 1 --kv-type q8_0 --json 2>/dev/null); rc=$?
check "kv-type q8_0" '[ $rc -eq 0 ] && [ "$(j "j.kv_type" <<<"$out")" = q8_0 ]'
out=$("$BIN" bench -m "$tmp/t.gguf" -p 40 -n 0 -r 1 -t 1 -ub 16 --json 2>/dev/null); rc=$?
check "-ub 16: prefill of 40 in passes of 16" '[ $rc -eq 0 ] && [ "$(j "j.n_ubatch + \",\" + (j.pp_tok_s.median > 0)" <<<"$out")" = "16,true" ]'
out=$("$BIN" bench -m "$tmp/t.gguf" -p 40 -n 0 -r 1 -t 1 --json 2>/dev/null)
check "-ub default 512" '[ "$(j "j.n_ubatch" <<<"$out")" = 512 ]'
"$BIN" bench -m "$tmp/t.gguf" -ub 0 >/dev/null 2>"$tmp/err"; rc=$?
check "bad -ub exits 2" '[ $rc -eq 2 ] && grep -q "\-ub needs an integer" "$tmp/err"'
"$BIN" bench -m "$tmp/t.gguf" --batch 1 >/dev/null 2>"$tmp/err"; rc=$?
check "bad --batch exits 2" '[ $rc -eq 2 ] && grep -q "\-\-batch needs an integer" "$tmp/err"'
"$BIN" bench -m "$tmp/t.gguf" --kv-type q4_0 >/dev/null 2>"$tmp/err"; rc=$?
check "bad --kv-type exits 2" '[ $rc -eq 2 ] && grep -q "kv-type" "$tmp/err"'
txt=$("$BIN" bench -m "$tmp/t.gguf" -p 8 -n 2 -r 1 -t 1 --batch 2 2>/dev/null)
check "batch text line" 'grep -q "^batch2 .*x tg" <<<"$txt" && grep -q "bound the aggregate to 2.00x" <<<"$txt"'
# a mixture of experts: 4 tokens pick more distinct experts than one does, so
# a step of 4 reads more than a one-token step and the bound is below 4
"$BIN" mkmodel -q --preset tiny-moe --type q8_0 -o "$tmp/moe.gguf" || { echo "mkmodel failed"; exit 1; }
out=$("$BIN" bench -m "$tmp/moe.gguf" -p 0 -n 8 -t 1 -r 1 --batch 4 --json 2>/dev/null); rc=$?
check "moe batch: bytes bound between 1 and 4" '[ $rc -eq 0 ] && [ "$(j "j.batch_ratio_bytes_bound>1 && j.batch_ratio_bytes_bound<3.9 && j.batch_step_weight_bytes_counted>j.weight_bytes_per_token" <<<"$out")" = true ]'
txt=$("$BIN" bench -m "$tmp/t.gguf" -p 8 -n 2 -r 1 -t 1 2>/dev/null)
check "text report" 'grep -q "^tg2 " <<<"$txt" && grep -q "% of ceiling" <<<"$txt" && grep -q "^pp8 " <<<"$txt"'
"$BIN" bench -m "$tmp/t.gguf" -r 0 >/dev/null 2>"$tmp/err"; rc=$?
check "bad -r exits 2" '[ $rc -eq 2 ] && grep -q "\-r needs an integer" "$tmp/err"'
"$BIN" bench >/dev/null 2>"$tmp/err"; rc=$?
check "missing -m exits 2" '[ $rc -eq 2 ] && grep -q "MODEL is required" "$tmp/err"'
"$BIN" bench -m "$tmp/missing.gguf" >/dev/null 2>"$tmp/err"; rc=$?
check "missing file exits 2" '[ $rc -eq 2 ] && [ -s "$tmp/err" ]'
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
