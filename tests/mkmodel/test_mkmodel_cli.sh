#!/usr/bin/env bash
# test_mkmodel_cli.sh - `kvwise mkmodel` and `kvwise quantize` from the
# command line: files open with `kvwise info`, shapes/types as asked,
# byte-identical for a seed, different for another, clear usage errors.
set -u
BIN=${KW_BIN:?KW_BIN not set}
fail=0; pass=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
j() { node -e "const j=JSON.parse(require('fs').readFileSync(0,'utf8')); process.stdout.write(String($1))"; }

"$BIN" mkmodel -q --preset tiny --type q8_0 --seed 3 -o "$tmp/a.gguf"; rc=$?
check "tiny exit 0" '[ $rc -eq 0 ]'
"$BIN" mkmodel -q --preset tiny --type q8_0 --seed 3 -o "$tmp/b.gguf"
"$BIN" mkmodel -q --preset tiny --type q8_0 --seed 4 -o "$tmp/c.gguf"
check "same seed identical" 'cmp -s "$tmp/a.gguf" "$tmp/b.gguf"'
check "other seed differs" '! cmp -s "$tmp/a.gguf" "$tmp/c.gguf"'
info=$("$BIN" info -m "$tmp/a.gguf" --json)
check "tiny shape" '[ "$(j "[j.arch,j.n_layer,j.n_embd,j.n_head,j.n_head_kv,j.n_ff,j.n_vocab,j.tied].join()" <<<"$info")" = "llama,4,256,8,2,768,1024,false" ]'
check "tiny types" '[ "$(j "JSON.stringify(j.tensor_type_counts)" <<<"$info")" = "{\"F32\":9,\"Q8_0\":30}" ]'
check "tiny tokenizer" '[ "$(j "[j.tokenizer,j.tokenizer_pre,j.chat_template].join()" <<<"$info")" = "gpt2,gpt-2,true" ]'

"$BIN" mkmodel -q --preset qwen3-0.6b --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 128 --ff 512 --vocab 600 \
  --type q4_k -o "$tmp/q3.gguf"; rc=$?
check "custom qwen3 exit 0" '[ $rc -eq 0 ]'
info=$("$BIN" info -m "$tmp/q3.gguf" --json)
check "custom qwen3 shape" '[ "$(j "[j.arch,j.n_layer,j.n_embd,j.n_head,j.head_dim,j.n_ff,j.n_vocab,j.tied].join()" <<<"$info")" = "qwen3,2,256,4,128,512,600,true" ]'
check "custom qwen3 types" '[ "$(j "JSON.stringify(j.tensor_type_counts)" <<<"$info")" = "{\"F32\":9,\"Q4_K\":15}" ]'

"$BIN" quantize "$tmp/a.gguf" "$tmp/a4.gguf" q4_0 2>/dev/null; rc=$?
check "quantize exit 0" '[ $rc -eq 0 ]'
info=$("$BIN" info -m "$tmp/a4.gguf" --json)
check "quantize types" '[ "$(j "JSON.stringify(j.tensor_type_counts)" <<<"$info")" = "{\"F32\":9,\"Q4_0\":30}" ]'
check "quantize keeps tokenizer" '[ "$(j "[j.n_vocab,j.chat_template,j.file_type].join()" <<<"$info")" = "1024,true,2" ]'

# llama-quantize mixes (tiny: 4 layers, attn_v and ffn_down Q6_K on layers 2 and 3,
# output Q6_K): the file loads and generates; mkmodel takes the names too
"$BIN" mkmodel -q --preset tiny --type f16 --seed 3 -o "$tmp/f16.gguf"
"$BIN" quantize "$tmp/f16.gguf" "$tmp/q4km.gguf" Q4_K_M 2>"$tmp/err"; rc=$?
check "quantize q4_k_m exit 0" '[ $rc -eq 0 ] && grep -q "Q4_K_M" "$tmp/err"'
info=$("$BIN" info -m "$tmp/q4km.gguf" --json)
check "q4_k_m file type" '[ "$(j "j.file_type" <<<"$info")" = "15" ]'
check "q4_k_m types" '[ "$(j "JSON.stringify(j.tensor_type_counts)" <<<"$info")" = "{\"F32\":9,\"Q4_K\":25,\"Q6_K\":5}" ]'
out=$("$BIN" generate -m "$tmp/q4km.gguf" -p "hello" -n 8 --temp 0 2>/dev/null); rc=$?
check "q4_k_m generates" '[ $rc -eq 0 ] && [ -n "$out" ]'
"$BIN" mkmodel -q --preset tiny --type q5_k_m -o "$tmp/q5km.gguf"; rc=$?
info=$("$BIN" info -m "$tmp/q5km.gguf" --json)
check "mkmodel q5_k_m" '[ $rc -eq 0 ] && [ "$(j "JSON.stringify(j.tensor_type_counts)+j.file_type" <<<"$info")" = "{\"F32\":9,\"Q5_K\":25,\"Q6_K\":5}17" ]'
out=$("$BIN" generate -m "$tmp/q5km.gguf" -p "hello" -n 8 --temp 0 2>/dev/null); rc=$?
check "q5_k_m generates" '[ $rc -eq 0 ] && [ -n "$out" ]'
check "quantize help names the mixes" '"$BIN" quantize --help | grep -q "q4_k_m"'

"$BIN" mkmodel -o "$tmp/x.gguf" --preset huge 2>"$tmp/err"; rc=$?
check "bad preset exit 2" '[ $rc -eq 2 ] && grep -q "unknown preset" "$tmp/err"'
"$BIN" mkmodel -o "$tmp/x.gguf" --type q9_9 2>"$tmp/err"; rc=$?
check "bad type exit 2" '[ $rc -eq 2 ] && grep -q "unknown type" "$tmp/err"'
"$BIN" mkmodel --preset tiny 2>/dev/null; rc=$?
check "no -o exit 2" '[ $rc -eq 2 ]'
"$BIN" mkmodel -o "$tmp/x.gguf" --layers 0 2>/dev/null; rc=$?
check "bad layers exit 2" '[ $rc -eq 2 ]'
"$BIN" quantize "$tmp/a.gguf" "$tmp/z.gguf" 2>/dev/null; rc=$?
check "quantize usage exit 2" '[ $rc -eq 2 ]'
"$BIN" quantize "$tmp/nope.gguf" "$tmp/z.gguf" q8_0 2>"$tmp/err"; rc=$?
check "quantize missing input" '[ $rc -eq 2 ] && grep -q "nope.gguf" "$tmp/err"'
# Qwen3.5 hybrids: the preset, the delta-net options, refusal on a plain architecture
"$BIN" mkmodel -q --preset qwen35-tiny --type q8_0 -o "$tmp/q35.gguf"; rc=$?
check "qwen35-tiny exit 0" '[ $rc -eq 0 ]'
info=$("$BIN" info -m "$tmp/q35.gguf" --json)
check "qwen35-tiny shape" '[ "$(j "[j.arch,j.n_layer,j.n_embd,j.n_head,j.head_dim,j.rope_dim,j.n_tensors].join()" <<<"$info")" = "qwen35,8,256,4,64,16,109" ]'
"$BIN" mkmodel -q --arch qwen35 --layers 6 --attn-interval 3 --ssm-state 32 --ssm-groups 2 --ssm-heads 8 --rope-dim 8 \
  -o "$tmp/q35b.gguf"; rc=$?
check "qwen35 custom exit 0" '[ $rc -eq 0 ]'
info=$("$BIN" info -m "$tmp/q35b.gguf" --json)
check "qwen35 custom shape" '[ "$(j "[j.arch,j.n_layer,j.rope_dim,j.n_tensors].join()" <<<"$info")" = "qwen35,6,8,81" ]'
"$BIN" mkmodel -q --preset tiny --ssm-heads 4 -o "$tmp/x.gguf" 2>"$tmp/err"; rc=$?
check "ssm option on llama refused" '[ $rc -eq 2 ] && grep -q "ssm" "$tmp/err" && [ ! -e "$tmp/x.gguf" ]'
"$BIN" mkmodel -q --preset qwen35-tiny --ssm-heads 3 -o "$tmp/x.gguf" 2>"$tmp/err"; rc=$?
check "qwen35 bad heads refused" '[ $rc -eq 2 ] && grep -q "multiple of ssm groups" "$tmp/err"'
# re-encoding a hybrid: f32 -> Q4_K_M gives the bytes mkmodel writes in Q4_K_M directly
# (same rows, same mix rules: ssm_conv1d and the 1-D tensors stay F32)
"$BIN" mkmodel -q --preset qwen35-tiny --type f32 -o "$tmp/q35f.gguf"
"$BIN" mkmodel -q --preset qwen35-tiny --type q4_k_m -o "$tmp/q35m.gguf"
"$BIN" quantize "$tmp/q35f.gguf" "$tmp/q35r.gguf" q4_k_m 2>/dev/null; rc=$?
check "qwen35 quantize = direct" '[ $rc -eq 0 ] && cmp -s "$tmp/q35m.gguf" "$tmp/q35r.gguf"'
"$BIN" mkmodel -q --preset qwen35-tiny --mtp --type f32 -o "$tmp/q35tf.gguf"
"$BIN" mkmodel -q --preset qwen35-tiny --mtp --type q4_k_m -o "$tmp/q35tm.gguf"
"$BIN" quantize "$tmp/q35tf.gguf" "$tmp/q35tr.gguf" q4_k_m 2>/dev/null; rc=$?
check "qwen35 mtp quantize = direct" '[ $rc -eq 0 ] && cmp -s "$tmp/q35tm.gguf" "$tmp/q35tr.gguf"'
info=$("$BIN" info -m "$tmp/q35tm.gguf" --json)
check "qwen35 mtp layers" '[ "$(j "[j.n_layer,j.n_tensors].join()" <<<"$info")" = "9,124" ]'
"$BIN" mkmodel -q --preset tiny --mtp -o "$tmp/x.gguf" 2>"$tmp/err"; rc=$?
check "mtp on llama refused" '[ $rc -eq 2 ] && grep -q "mtp" "$tmp/err"'
check "mkmodel help lists qwen35" '"$BIN" mkmodel --help | grep -q "qwen3.5-27b"'
check "mkmodel help" '"$BIN" mkmodel --help | grep -q "llama3.2-1b"'
check "quantize help" '"$BIN" quantize --help | grep -q "TYPE"'
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
