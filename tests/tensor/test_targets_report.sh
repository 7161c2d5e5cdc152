#!/usr/bin/env bash
# test_targets_report.sh - bench/targets.sh --report: the verdict table from
# the raw outputs a run leaves behind, on hand-made outputs with the fields
# compare_peer.sh --json and kvwise bench --json write (taken from a real
# run, values changed to sit on both sides of each target).
# Checks the rules the table applies: a peer target needs both the per-round
# median and the ratio of medians; the decode rows say how near each engine
# came to the ceiling; the depth, batch and pp4096 rows; the summary count;
# a bad --report directory. Needs node (as targets.sh does).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
targets=$here/../../bench/targets.sh
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

printf 'llama=/peers/llama-bench\nik=/peers/ik-bench\n' > "$d/peers"
# peer JSON: kvwise medians, then per peer its medians, ratios and % of ceiling
peer_json() {   # type kv_tg kv_pct ll_tg ll_ratio ll_round ll_pct ik_tg ik_ratio ik_round ik_pct pp ik_pp_ratio
  cat > "$d/peer-$1.json" <<EOF
{"rounds":3,"kvwise":{"pp":${12},"tg":$2,"bandwidth_gb_s":35.0,"tg_pct_of_ceiling":$3,"pp_rounds":[${12}],"tg_rounds":[$2]},
 "peers":[
  {"path":"/peers/llama-bench","pp":100,"tg":$4,"pp_ratio":3.0,"tg_ratio":$5,"pp_ratio_per_round":3.0,"tg_ratio_per_round":$6,"tg_pct_of_ceiling":$7},
  {"path":"/peers/ik-bench","pp":200,"tg":$8,"pp_ratio":${13},"tg_ratio":$9,"pp_ratio_per_round":${13},"tg_ratio_per_round":${10},"tg_pct_of_ceiling":${11}}]}
EOF
}
# q4_0: every peer target met; q8_0: llama.cpp 1.25x per round but 1.15x by medians (NOT met),
# ik 0.98x per round (NOT met), both engines near the ceiling
peer_json q4_0 60.8 76 39.4 1.54 1.54 50 49.2 1.24 1.28 62 360 1.25
peer_json q8_0 22.6 85 19.6 1.15 1.25 76 22.6 1.00 0.98 86 336 1.41
peer_json f16 0 0 10 1 1 50 10 1 1 50 253 0.97
bench_json() {   # file tg_median extra-fields
  cat > "$d/$1" <<EOF
{"model":"m.gguf","threads":2,"pp_tok_s":{"median":${4:-0},"min":0,"max":0},"tg_tok_s":{"median":$2,"min":0,"max":0}$3}
EOF
}
bench_json batch-q4_0.json 56.7 ',"batch_tok_s":{"median":159.5,"min":0,"max":0},"batch_ratio_to_tg":2.81'
bench_json batch-q8_0.json 27.2 ',"batch_tok_s":{"median":65.0,"min":0,"max":0},"batch_ratio_to_tg":2.39'
for i in 1 2 3; do
  bench_json pp512.$i.json 0 '' 300
  bench_json pp4096.$i.json 0 '' $((200 + 10 * i))   # 70%, 73%, 77%: median 73%
done
bench_json depth.json 52.0 ',"tg_depth0_tok_s":{"median":65.8,"min":0,"max":0},"tg_depth_ratio":0.79,"tg_depth_ratio_bound":0.83'

out=$(bash "$targets" --report "$d")
echo "$out"
row() { grep -F "| $1 |" <<< "$out" || fail "no row '$1'"; }
verdict() { row "$1" | awk -F'|' '{gsub(/^ +| +$/, "", $4); print $4}'; }
[ "$(verdict 'q4_0 tg128 >= 1.2x llama.cpp')" = met ] || fail "q4_0 vs llama.cpp should be met"
[ "$(verdict 'q4_0 tg128 >= 1.0x ik_llama.cpp')" = met ] || fail "q4_0 vs ik should be met"
[ "$(verdict 'q8_0 tg128 >= 1.2x llama.cpp')" = "NOT met" ] || fail "1.25x per round but 1.15x by medians must be NOT met"
[ "$(verdict 'q8_0 tg128 >= 1.0x ik_llama.cpp')" = "NOT met" ] || fail "0.98x per round must be NOT met"
row 'q8_0 tg128 >= 1.0x ik_llama.cpp' | grep -qF 'kvwise 85%, peer 86% of the ceiling at 35 GB/s' || fail "decode row lacks the ceiling note"
[ "$(verdict 'q8_0 tg128 >= 75% of the bandwidth ceiling')" = met ] || fail "85% of the ceiling is met"
[ "$(verdict 'f16 pp512 >= 1.0x ik_llama.cpp')" = "NOT met" ] || fail "0.97x prefill must be NOT met"
[ "$(verdict 'q4_0 batch of 4 >= 2.5x tg')" = met ] || fail "batch 2.81x is met"
[ "$(verdict 'q8_0 batch of 4 >= 2.5x tg')" = "NOT met" ] || fail "batch 2.39x is not met"
row 'q4_0 pp4096 >= 70% of pp512' | grep -qF '73% (pairs 70% 73% 77%)' || fail "pp4096 median of the pairs"
[ "$(verdict 'q4_0 tg@4096 >= 80% of tg128')" = "NOT met" ] || fail "79% at depth must be NOT met"
row 'q4_0 tg@4096 >= 80% of tg128' | grep -qF 'KV bytes allow 83%' || fail "depth row lacks the bytes bound"
grep -qF '8 met, 5 not met, 0 not measured' <<< "$out" || fail "summary count"

# the peers named on the command line win over the run's record: unknown paths are not measured
out=$(bash "$targets" --report "$d" --llama /elsewhere/llama-bench)
[ "$(verdict 'q4_0 tg128 >= 1.2x llama.cpp')" = "not measured" ] || fail "an unknown peer path must be not measured"

if bash "$targets" --report "$d/missing" 2> "$d/err"; then fail "--report of a missing directory succeeded"; fi
grep -q "is not a directory" "$d/err" || fail "no clear error for a missing --report directory"
echo "test_targets_report: ok"
