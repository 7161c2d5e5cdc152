#!/usr/bin/env bash
# compare_peer.sh - kvwise bench vs a llama.cpp / ik_llama.cpp llama-bench on
# the same model, alternating runs (A B A B ...) so both see the same load.
#
#   bench/compare_peer.sh -m MODEL [--peer PATH/llama-bench] [-p 512] [-n 128] [-t 2] [-k ROUNDS]
#                         [--peer-args "-fa 1 -rtr 1"]
#
# Prints per round pp/tg of each and, at the end, the median of each and the
# ratio kvwise/peer. Without --peer (or if it is not executable) it still
# runs kvwise and says that no peer was compared.
set -euo pipefail
cd "$(dirname "$0")/.."
model= peer= p=512 n=128 t=2 k=3 peer_args=
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    --peer) peer=$2; shift 2 ;;
    --peer-args) peer_args=$2; shift 2 ;;
    -p) p=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    -t) t=$2; shift 2 ;;
    -k) k=$2; shift 2 ;;
    *) echo "usage: $0 -m MODEL [--peer llama-bench] [--peer-args ARGS] [-p N] [-n N] [-t N] [-k ROUNDS]" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "compare_peer.sh: -m MODEL is required" >&2; exit 2; }
kw=${KW_BIN:-build/kvwise}
[ -x "$kw" ] || { echo "compare_peer.sh: $kw not built (scripts/build.sh)" >&2; exit 2; }
if [ -n "$peer" ] && [ ! -x "$peer" ]; then
  echo "compare_peer.sh: peer '$peer' is not executable; running kvwise only" >&2; peer=
fi
[ -n "$peer" ] || echo "no peer binary given: kvwise figures only (pass --peer /path/to/llama-bench)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((i = 1; i <= k; i++)); do
  "$kw" bench -m "$model" -p "$p" -n "$n" -t "$t" -r 1 --json > "$tmp/kw.$i.json"
  if [ -n "$peer" ]; then
    # shellcheck disable=SC2086
    "$peer" -m "$model" -t "$t" -p "$p" -n "$n" -r 1 -o json $peer_args > "$tmp/peer.$i.json" 2>/dev/null
  fi
  echo "round $i done" >&2
done

node - "$tmp" "$k" "${peer:+yes}" <<'JS'
const fs = require('fs');
const [dir, k, hasPeer] = process.argv.slice(2);
const med = a => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const kw = { pp: [], tg: [], bw: [], pct: [] }, pe = { pp: [], tg: [] };
for (let i = 1; i <= +k; i++) {
  const j = JSON.parse(fs.readFileSync(`${dir}/kw.${i}.json`, 'utf8'));
  kw.pp.push(j.pp_tok_s.median); kw.tg.push(j.tg_tok_s.median);
  kw.bw.push(j.bandwidth_bytes_s.median / 1e9); kw.pct.push(j.tg_pct_of_ceiling);
  let line = `round ${i}: kvwise pp ${j.pp_tok_s.median.toFixed(1)} tg ${j.tg_tok_s.median.toFixed(1)} (bw ${(j.bandwidth_bytes_s.median / 1e9).toFixed(1)} GB/s)`;
  if (hasPeer) {
    const recs = JSON.parse(fs.readFileSync(`${dir}/peer.${i}.json`, 'utf8'));
    for (const r of recs) {
      if (r.n_prompt > 0 && r.n_gen === 0) pe.pp.push(r.avg_ts);
      if (r.n_gen > 0 && r.n_prompt === 0) pe.tg.push(r.avg_ts);
    }
    line += `   peer pp ${pe.pp.at(-1)?.toFixed(1)} tg ${pe.tg.at(-1)?.toFixed(1)}`;
  }
  console.log(line);
}
console.log(`kvwise median: pp ${med(kw.pp).toFixed(1)} tok/s, tg ${med(kw.tg).toFixed(1)} tok/s, bandwidth ${med(kw.bw).toFixed(1)} GB/s, tg ${med(kw.pct).toFixed(0)}% of ceiling`);
if (hasPeer) {
  console.log(`peer   median: pp ${med(pe.pp).toFixed(1)} tok/s, tg ${med(pe.tg).toFixed(1)} tok/s`);
  console.log(`ratio kvwise/peer: pp ${(med(kw.pp) / med(pe.pp)).toFixed(2)}x, tg ${(med(kw.tg) / med(pe.tg)).toFixed(2)}x`);
}
JS
