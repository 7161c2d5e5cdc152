#!/usr/bin/env bash
# test_info.sh - `kvwise info` on a conformance model (text and --json agree
# with the manifest) and on broken files (one-line error, exit 2).
set -u
BIN=${KW_BIN:?KW_BIN not set}
M=${KW_SHARED_DIR:-../shared}/conformance/models
[ -d "$M" ] || { echo "SKIPPED: $M absent"; exit 77; }
fail=0; pass=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

out=$("$BIN" info -m "$M/qwen2-q8_0.gguf"); rc=$?
check "text exit 0" '[ $rc -eq 0 ]'
check "text arch" 'grep -q "^architecture  qwen2$" <<<"$out"'
check "text heads" 'grep -q "^heads         8 (kv 2), head_dim 32$" <<<"$out"'
check "text types" 'grep -q "f32:21 q8_0:29" <<<"$out"'
check "text tied" 'grep -q "tied to token_embd" <<<"$out"'
js=$("$BIN" info -m "$M/llama-q4_k_m.gguf" --json); rc=$?
check "json exit 0" '[ $rc -eq 0 ]'
check "json counts" 'node -e "const j=JSON.parse(process.argv[1]); if (j.tensor_type_counts.Q4_K!==25||j.tensor_type_counts.Q6_K!==5||j.n_layer!==4||j.n_vocab!==512||j.file_bytes!==$(stat -c %s "$M/llama-q4_k_m.gguf")) process.exit(1)" "$js"'
js=$("$BIN" info -m "$M/stories260K.gguf" --json --tensors)
check "json tensors" 'node -e "const j=JSON.parse(process.argv[1]); const t=j.tensors.find(x=>x.name===\"blk.0.ffn_gate.weight\"); if (j.tensors.length!==48||!t||t.type!==\"f32\"||t.ne.join()!==\"64,172\"||t.bytes!==64*172*4) process.exit(1)" "$js"'
txt=$("$BIN" info -m "$M/stories260K.gguf" --tensors)
check "text tensors" 'grep -qE "^blk.4.attn_v.weight +f32 +64 x 32 " <<<"$txt"'
head -c 3000 "$M/llama-q4_0.gguf" > "$tmp/cut.gguf"
err=$("$BIN" info -m "$tmp/cut.gguf" 2>&1 >/dev/null); rc=$?
check "truncated exit 2" '[ $rc -eq 2 ]'
check "truncated one line" '[ $(printf "%s\n" "$err" | wc -l) -eq 1 ]'
check "truncated names file" 'grep -q "cut.gguf: " <<<"$err"'
printf 'not a model at all' > "$tmp/junk.gguf"
err=$("$BIN" info -m "$tmp/junk.gguf" 2>&1 >/dev/null); rc=$?
check "junk exit 2" '[ $rc -eq 2 ]'
check "junk message" 'grep -q "bad magic (not a GGUF file)" <<<"$err"'
"$BIN" info --help | grep -q "kvwise info -m MODEL"; check "help" '[ $? -eq 0 ]'
"$BIN" info >/dev/null 2>&1; rc=$?
check "no model exit 2" '[ $rc -eq 2 ]'
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
