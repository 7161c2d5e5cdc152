#!/usr/bin/env bash
# test_tokenize_cli.sh - `kvwise tokenize` end to end on conformance vocabs:
# ids on one line, --json, --no-bos, --special, -f FILE, --help, and a
# one-line error (exit 2) for a file without a tokenizer.
set -u
BIN=${KW_BIN:?KW_BIN not set}
T=${KW_SHARED_DIR:-../shared}/conformance/tokenizer
M=${KW_SHARED_DIR:-../shared}/conformance/models
[ -d "$T" ] || { echo "SKIPPED: $T absent"; exit 77; }
fail=0; pass=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# ids from the oracle (llama-spm: BOS 1 added; gpt-2: no BOS)
out=$("$BIN" tokenize -m "$T/ggml-vocab-llama-spm.gguf" -p "Once upon a time"); rc=$?
check "spm exit 0" '[ $rc -eq 0 ]'
check "spm ids" '[ "$out" = "1 9038 2501 263 931" ]'
out=$("$BIN" tokenize -m "$T/ggml-vocab-llama-spm.gguf" -p "Once upon a time" --no-bos)
check "spm --no-bos" '[ "$out" = "9038 2501 263 931" ]'
out=$("$BIN" tokenize -m "$T/ggml-vocab-gpt-2.gguf" -p "Once upon a time" --json)
check "gpt2 --json" '[ "$out" = "[7454, 2402, 257, 640]" ]'
printf 'Once upon a time' > "$tmp/p.txt"
out=$("$BIN" tokenize -m "$T/ggml-vocab-gpt-2.gguf" -f "$tmp/p.txt")
check "gpt2 -f" '[ "$out" = "7454 2402 257 640" ]'
# special text: plain text by default, the control token with --special
out=$("$BIN" tokenize -m "$T/ggml-vocab-gpt-2.gguf" -p "<|endoftext|>")
check "no --special" '[ "$out" != "50256" ]'
out=$("$BIN" tokenize -m "$T/ggml-vocab-gpt-2.gguf" -p "<|endoftext|>" --special)
check "--special" '[ "$out" = "50256" ]'
out=$("$BIN" tokenize -m "$T/ggml-vocab-llama-spm.gguf" -p "" )
check "empty prompt" '[ "$out" = "1" ]'
# a model file without tokenizer metadata: one-line error, exit 2
if [ -f "$M/stories260K.gguf" ]; then
  head -c 64 "$M/stories260K.gguf" > "$tmp/cut.gguf"
  err=$("$BIN" tokenize -m "$tmp/cut.gguf" -p hi 2>&1 >/dev/null); rc=$?
  check "broken exit 2" '[ $rc -eq 2 ]'
  check "broken one line" '[ $(printf "%s\n" "$err" | wc -l) -eq 1 ]'
fi
"$BIN" tokenize -m "$T/ggml-vocab-gpt-2.gguf" 2>/dev/null; rc=$?
check "usage exit 2" '[ $rc -eq 2 ]'
"$BIN" tokenize --help | grep -q "kvwise tokenize -m MODEL"; check "help" '[ $? -eq 0 ]'
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
