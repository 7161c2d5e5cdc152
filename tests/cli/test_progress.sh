#!/usr/bin/env bash
# test_progress.sh - progress of long work (include/kvwise/progress.h) as a
# person sees it: `kvwise mkmodel` and `kvwise quantize` run in a real
# terminal (tmux) show a bar that advances (two or more captures of the
# screen with a growing share) and ends at 100% with a "done" line; with
# stderr on a pipe, mkmodel writes plain lines (no escape codes, no carriage
# returns) at most one per second (arrival times taken by the reader), then
# the closing "done" line. The model is a small K-quant (the reference q4_k
# quantizer is slow enough for a few seconds of work in a 20 MiB file).
# Skipped under ASan (the bar's timing is what is tested; the same code runs
# under the sanitizers in every mkmodel of the e2e tests) and without tmux.
set -u
BIN=${KW_BIN:?KW_BIN not set}
command -v tmux >/dev/null || { echo "SKIPPED: tmux not installed (scripts/install-deps.sh)"; exit 77; }
if ldd "$BIN" 2>/dev/null | grep -q libasan; then echo "SKIPPED: ASan build (timing of the bar)"; exit 77; fi
fail=0; pass=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
tmp=$(mktemp -d); sess="kwprog$$"
trap 'tmux kill-session -t "$sess" 2>/dev/null; rm -rf "$tmp"' EXIT
SHAPE=(--preset tiny --embd 1024 --ff 4096 --heads 16 --kv-heads 4 --vocab 4096)

# Runs CMD in a 120x10 tmux pane, capturing the screen every 0.15 s until
# CMD prints its marker; echoes the distinct percentages the bar showed.
bar_run() {
  local name=$1; shift
  tmux new-session -d -s "$sess" -x 120 -y 10 "$* ; echo EXIT=\$? ; sleep 30"
  local seen="" i
  for i in $(seq 1 200); do
    sleep 0.15
    local scr; scr=$(tmux capture-pane -p -t "$sess")
    printf '%s\n' "$scr" > "$tmp/$name.screen"
    local pct; pct=$(grep -oE '\] +[0-9]+%' <<<"$scr" | tail -1 | grep -oE '[0-9]+')
    [ -n "$pct" ] && [[ " $seen " != *" $pct "* ]] && seen="$seen $pct"
    grep -q '^EXIT=' <<<"$scr" && break
  done
  tmux kill-session -t "$sess" 2>/dev/null
  echo "$seen"
}

# increasing list of at least 2 values ending at 100
advanced() { node -e 'const v=process.argv[1].trim().split(/\s+/).map(Number); process.exit(v.length>=3 && v.every((x,i)=>!i||x>v[i-1]) && v[v.length-1]===100 ? 0 : 1)' "$1"; }

seen=$(bar_run mkmodel "$BIN" mkmodel "${SHAPE[@]}" --layers 2 --type q4_k -o "$tmp/a.gguf")
check "mkmodel exit 0" 'grep -q "^EXIT=0" "$tmp/mkmodel.screen"'
check "mkmodel bar advanced ($seen)" 'advanced "$seen"'
check "mkmodel bar has rate and ETA" 'grep -qE "\[#+\.*\] +[0-9]+% .*MiB/s ETA" "$tmp/mkmodel.screen"'
check "mkmodel done line" 'grep -q "kvwise mkmodel: writing tensors: done, " "$tmp/mkmodel.screen"'

"$BIN" mkmodel "${SHAPE[@]}" --layers 2 --type f16 -q -o "$tmp/f16.gguf"
seen=$(bar_run quantize "$BIN" quantize "$tmp/f16.gguf" "$tmp/q.gguf" q4_k)
check "quantize exit 0" 'grep -q "^EXIT=0" "$tmp/quantize.screen"'
check "quantize bar advanced ($seen)" 'advanced "$seen"'
check "quantize done line" 'grep -q "kvwise quantize: writing tensors: done, " "$tmp/quantize.screen"'

# stderr on a pipe: plain lines, each stamped with its arrival time
"$BIN" mkmodel "${SHAPE[@]}" --layers 4 --type q4_k -o "$tmp/b.gguf" 2>&1 >/dev/null |
  while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done > "$tmp/lines.txt"
n=$(grep -c 'writing tensors: .*% .*ETA' "$tmp/lines.txt")
check "pipe: periodic lines ($n)" '[ "$n" -ge 2 ]'
check "pipe: no escape codes or carriage returns" '! grep -q $'"'"'[\r\033]'"'"' "$tmp/lines.txt"'
check "pipe: at most one line per second" 'node -e "
  const t=require(\"fs\").readFileSync(process.argv[1],\"utf8\").split(\"\n\").filter(l=>/% .*ETA/.test(l)).map(l=>parseFloat(l));
  for (let i=1;i<t.length;i++) if (t[i]-t[i-1] < 0.95) { console.log(\"gap\", t[i]-t[i-1]); process.exit(1); }" "$tmp/lines.txt"'
check "pipe: closing done line" 'grep -q "writing tensors: done, .* in .* s (" "$tmp/lines.txt"'
check "pipe: shares grow" 'node -e "
  const v=require(\"fs\").readFileSync(process.argv[1],\"utf8\").split(\"\n\").map(l=>/: +([0-9]+)% /.exec(l)).filter(Boolean).map(m=>+m[1]);
  process.exit(v.length>=2 && v.every((x,i)=>!i||x>=v[i-1]) ? 0 : 1)" "$tmp/lines.txt"'

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
