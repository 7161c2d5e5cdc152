#!/usr/bin/env bash
# e2e_curl.sh - `curl` drives kvwise serve: chat (JSON and SSE) and
# completions, the way the README shows it. Uses a tiny model from
# `kvwise mkmodel` or, when this build cannot load models, the stub engine.
set -u
command -v curl >/dev/null || { echo "curl missing: skip"; exit 77; }
BIN=${KW_BIN:?KW_BIN not set}
tmp=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else fails=$((fails+1)); echo "CHECK failed: $1"; fi; }
if "$BIN" mkmodel --preset tiny --seed 3 -o "$tmp/m.gguf" >/dev/null 2>&1; then model=(-m "$tmp/m.gguf" --threads 1); else model=(--stub-engine); fi
"$BIN" serve "${model[@]}" --port 0 --ctx-size 512 2>"$tmp/log" & pid=$!
for _ in $(seq 200); do grep -q "ready on" "$tmp/log" && break; sleep 0.05; done
port=$(sed -n 's/.*ready on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$tmp/log")
check "server started" '[ -n "$port" ]'
U=http://127.0.0.1:$port
out=$(curl -s -w '\n%{http_code}' $U/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8}')
check "chat 200" '[ "$(tail -n1 <<<"$out")" = 200 ]'
check "chat has a message" 'grep -q "\"role\":\"assistant\"" <<<"$out"'
check "chat has usage" 'grep -q "\"completion_tokens\":" <<<"$out"'
out=$(curl -sN $U/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"stream":true}')
check "SSE chunks" '[ "$(grep -c "^data: {" <<<"$out")" -ge 2 ]'
check "SSE [DONE]" '[ "$(grep "^data: " <<<"$out" | tail -n1)" = "data: [DONE]" ]'
out=$(curl -s $U/v1/completions -H 'Content-Type: application/json' -d '{"prompt":"Hello","max_tokens":5}')
check "completion text" 'grep -q "\"object\":\"text_completion\"" <<<"$out"'
check "health" '[ "$(curl -s -o /dev/null -w "%{http_code}" $U/health)" = 200 ]'
kill -TERM $pid; wait $pid; rc=$?
check "exit 0 on SIGTERM" '[ $rc = 0 ]'
echo "$passes passed, $fails failed"
[ $fails = 0 ]
