#!/usr/bin/env bash
# compare_peer.sh - kvwise bench vs one or two llama.cpp / ik_llama.cpp
# llama-bench binaries on the same model, alternating runs (A B C A B C ...)
# so all see the same load.
#
#   bench/compare_peer.sh -m MODEL [--peer PATH/llama-bench [--peer-args "..."]]
#                         [--peer2 PATH/llama-bench [--peer2-args "-fa 1 -rtr 1"]]
#                         [-p 512] [-n 128] [-t 2] [-k ROUNDS] [--no-probe]
#                         [--kw-args "--experts load"] [--json FILE]
#
# --kw-args ARGS go to every kvwise bench run (its own and the probes);
# a mixture of experts compared with ik_llama.cpp's -rtr (every expert
# repacked at load) takes "--experts load", the same state.
#
# --json FILE also writes the medians and ratios as one JSON object (what
# bench/targets.sh reads).
#
# Prints per round pp/tg of each and, at the end, the median of each and the
# ratio kvwise/peer, the median of the per-round tg ratios (each engine's
# run beside the other's, so mostly in the same host state), plus the load
# average before and after. Without --peer
# (or if it is not executable) it still runs kvwise and says that no peer
# was compared.
#
# Decode is bound by memory bandwidth, and a shared host's swings between
# minutes (here 37 <-> 57 GB/s) decide which engine "wins" a round. So,
# unless --no-probe, the read bandwidth is probed (kvwise bench's probe of
# the model's weights in its own process, about 4 s)
# right before each peer run as kvwise probes before its own, every engine's
# tg is also put as a percentage of the ceiling that probe allows (bytes per
# decoded token from kvwise's report, the same file), and the median of the
# per-round ratios of those percentages is printed: the comparison with the
# bandwidth each run actually had. The probe is a moment before the run,
# and the state can flip within it, so the tg ratio is also printed over
# the rounds whose two probes (kvwise's own, the one before the peer) are
# within 15% of each other: those where both engines most likely ran in
# the same state.
set -euo pipefail
cd "$(dirname "$0")/.."
model= p=512 n=128 t=2 k=3 probe=1 json= kwargs=
peers=() pargs=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    --peer) peers[0]=$2; shift 2 ;;
    --peer-args) pargs[0]=$2; shift 2 ;;
    --peer2) peers[1]=$2; shift 2 ;;
    --peer2-args) pargs[1]=$2; shift 2 ;;
    -p) p=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    -t) t=$2; shift 2 ;;
    -k) k=$2; shift 2 ;;
    --no-probe) probe=0; shift ;;
    --kw-args) kwargs=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 -m MODEL [--peer llama-bench] [--peer-args ARGS] [--peer2 llama-bench] [--peer2-args ARGS] [-p N] [-n N] [-t N] [-k ROUNDS] [--no-probe] [--kw-args ARGS] [--json FILE]" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "compare_peer.sh: -m MODEL is required" >&2; exit 2; }
kw=${KW_BIN:-build/kvwise}
[ -x "$kw" ] || { echo "compare_peer.sh: $kw not built (scripts/build.sh)" >&2; exit 2; }
list=()
for i in 0 1; do
  pe=${peers[$i]:-}
  [ -n "$pe" ] || continue
  if [ ! -x "$pe" ]; then echo "compare_peer.sh: peer '$pe' is not executable; skipping it" >&2; continue; fi
  list+=("$i")
done
[ ${#list[@]} -gt 0 ] || echo "no peer binary given: kvwise figures only (pass --peer /path/to/llama-bench)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= k; r++)); do
  # shellcheck disable=SC2086
  "$kw" bench -m "$model" -p "$p" -n "$n" -t "$t" -r 1 --json $kwargs > "$tmp/kw.$r.json"
  for i in "${list[@]}"; do
    if [ "$probe" = 1 ] && [ "$n" -gt 0 ]; then
      # shellcheck disable=SC2086
      "$kw" bench -m "$model" -p 0 -n 0 -t "$t" -r 1 --json $kwargs > "$tmp/bw$i.$r.json"
    fi
    # shellcheck disable=SC2086
    "${peers[$i]}" -m "$model" -t "$t" -p "$p" -n "$n" -r 1 -o json ${pargs[$i]:-} > "$tmp/peer$i.$r.json" 2>/dev/null
  done
  echo "round $r done" >&2
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

names=()
for i in "${list[@]}"; do names+=("$i=${peers[$i]}"); done
node - "$tmp" "$k" "$json" "${names[@]}" <<'JS'
const fs = require('fs');
const [dir, k, jsonOut, ...peerSpecs] = process.argv.slice(2);
const peers = peerSpecs.map(s => { const i = s.indexOf('='); return { id: s.slice(0, i), path: s.slice(i + 1), pp: [], tg: [], pct: [], rel: [], same: [] }; });
const med = a => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const f = x => (x === undefined ? '-' : x.toFixed(1));
const kw = { pp: [], tg: [], bw: [], pct: [] };
for (let r = 1; r <= +k; r++) {
  const j = JSON.parse(fs.readFileSync(`${dir}/kw.${r}.json`, 'utf8'));
  kw.pp.push(j.pp_tok_s.median); kw.tg.push(j.tg_tok_s.median);
  kw.bw.push(j.bandwidth_bytes_s.median / 1e9); kw.pct.push(j.tg_pct_of_ceiling);
  let line = `round ${r}: kvwise pp ${f(j.pp_tok_s.median)} tg ${f(j.tg_tok_s.median)} (bw ${(j.bandwidth_bytes_s.median / 1e9).toFixed(1)} GB/s)`;
  for (const pe of peers) {
    const recs = JSON.parse(fs.readFileSync(`${dir}/peer${pe.id}.${r}.json`, 'utf8'));
    for (const x of recs) {
      if (x.n_prompt > 0 && x.n_gen === 0) pe.pp.push(x.avg_ts);
      if (x.n_gen > 0 && x.n_prompt === 0) pe.tg.push(x.avg_ts);
    }
    line += `   peer${+pe.id + 1} pp ${f(pe.pp.at(-1))} tg ${f(pe.tg.at(-1))}`;
    const bwf = `${dir}/bw${pe.id}.${r}.json`;
    if (fs.existsSync(bwf) && pe.tg.length === r && j.decode_bytes_per_token > 0) {
      const bw = JSON.parse(fs.readFileSync(bwf, 'utf8')).bandwidth_bytes_s.median;
      const pct = 100 * pe.tg.at(-1) * j.decode_bytes_per_token / bw;
      pe.pct.push(pct); pe.rel.push(j.tg_pct_of_ceiling / pct);
      const kbw = j.bandwidth_bytes_s.median;
      if (Math.abs(kbw - bw) <= 0.15 * Math.min(kbw, bw)) pe.same.push({ r, ratio: j.tg_tok_s.median / pe.tg.at(-1), bw: bw / 1e9 });
      line += ` (bw ${(bw / 1e9).toFixed(1)} GB/s)`;
    }
  }
  console.log(line);
}
console.log(`kvwise median: pp ${f(med(kw.pp))} tok/s, tg ${f(med(kw.tg))} tok/s, bandwidth ${med(kw.bw).toFixed(1)} GB/s, tg ${med(kw.pct).toFixed(0)}% of ceiling`);
for (const pe of peers) {
  const n = `peer${+pe.id + 1}`;
  console.log(`${n} (${pe.path}) median: pp ${f(pe.pp.length ? med(pe.pp) : undefined)} tok/s, tg ${f(pe.tg.length ? med(pe.tg) : undefined)} tok/s`);
  const ratio = (a, b) => (a.length && b.length ? (med(a) / med(b)).toFixed(2) + 'x' : '-');
  console.log(`ratio kvwise/${n}: pp ${ratio(kw.pp, pe.pp)}, tg ${ratio(kw.tg, pe.tg)}`);
  if (pe.tg.length === kw.tg.length && pe.tg.length > 1) {
    const rr = kw.tg.map((x, i) => x / pe.tg[i]);
    console.log(`tg per round (kvwise / ${n}, same round): median ${med(rr).toFixed(2)}x (rounds: ${rr.map(x => x.toFixed(2)).join(' ')})`);
  }
  if (pe.rel.length)
    console.log(`bandwidth-normalized tg: kvwise ${med(kw.pct).toFixed(0)}% vs ${n} ${med(pe.pct).toFixed(0)}% of the ceiling of the probe before it ` +
                `(the host can change state within a run: above 100% shows it); ` +
                `median of per-round ratios ${med(pe.rel).toFixed(2)}x (rounds: ${pe.rel.map(x => x.toFixed(2)).join(' ')})`);
  if (pe.rel.length)
    console.log(`tg in same-state rounds (both probes within 15%): ` + (pe.same.length
      ? `${pe.same.length} of ${pe.rel.length}, median ${med(pe.same.map(x => x.ratio)).toFixed(2)}x (` +
        pe.same.map(x => `round ${x.r} ${x.ratio.toFixed(2)}x at ${x.bw.toFixed(0)} GB/s`).join(', ') + ')'
      : `none of ${pe.rel.length}`));
}
if (jsonOut) {
  const opt = a => (a.length ? med(a) : null);
  const out = { rounds: +k, kvwise: { pp: opt(kw.pp), tg: opt(kw.tg), bandwidth_gb_s: opt(kw.bw), tg_pct_of_ceiling: opt(kw.pct),
                                      pp_rounds: kw.pp, tg_rounds: kw.tg }, peers: [] };
  for (const pe of peers) {
    const rr = pe.tg.length === kw.tg.length ? kw.tg.map((x, i) => x / pe.tg[i]) : [];
    const rp = pe.pp.length === kw.pp.length ? kw.pp.map((x, i) => x / pe.pp[i]) : [];
    out.peers.push({ path: pe.path, pp: opt(pe.pp), tg: opt(pe.tg), pp_rounds: pe.pp, tg_rounds: pe.tg,
                     pp_ratio: pe.pp.length && kw.pp.length ? med(kw.pp) / med(pe.pp) : null,
                     tg_ratio: pe.tg.length && kw.tg.length ? med(kw.tg) / med(pe.tg) : null,
                     pp_ratio_per_round: opt(rp), tg_ratio_per_round: opt(rr),
                     tg_pct_of_ceiling: opt(pe.pct) });
  }
  fs.writeFileSync(jsonOut, JSON.stringify(out, null, 1) + '\n');
}
JS
