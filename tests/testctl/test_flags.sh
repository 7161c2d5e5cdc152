#!/usr/bin/env bash
# test_flags.sh on|off BIN - the test flags of `kvwise serve` follow the build's
# KW_TESTCTL switch. on (test builds): `serve --help` lists every test flag,
# each is parsed (a bad value is a usage error, not an unknown option), and the
# binary holds the hooks' code. off (production): `serve --help` names none,
# each is refused as an unknown option (exit 2), and the binary holds none of
# the hooks' functions. The same greps run in both modes, so "off" passing
# means something: "on" proves they find the flags when they are there.
set -u
mode=${1:?on|off}
bin=${2:?kvwise binary}
flags=(--test-replay --test-replay-script --test-fail-alloc --stub-engine --stub-kv --stub-step-us)
symbols=(kw_fault_configure kw_fault_hit kw_mem_fail_nth kw_testctl_set_sampler kw_engine_stub_create)
fails=0 passes=0
check() { if eval "$1"; then passes=$((passes + 1)); else fails=$((fails + 1)); echo "CHECK failed ($mode): $2" >&2; fi; }

help=$("$bin" serve --help) || { echo "serve --help failed" >&2; exit 1; }
check '[ -n "$help" ]' "serve --help prints something"
for f in "${flags[@]}"; do
  listed=0; grep -q -- "^  $f " <<<"$help" && listed=1
  # a value that no flag accepts: a test flag that exists says so about its value (or takes it
  # and then stops at the missing model), an absent one is an unknown option
  out=$("$bin" serve "$f" not-a-number --port 0 --host 256.0.0.1 2>&1 </dev/null); rc=$?
  unknown=0; grep -q "unknown option '$f'" <<<"$out" && unknown=1
  if [ "$mode" = on ]; then
    check '[ $listed = 1 ]' "serve --help lists $f"
    check '[ $unknown = 0 ]' "$f is parsed (said: $(tail -n 1 <<<"$out"))"
  else
    check '[ $listed = 0 ]' "serve --help does not list $f"
    check '[ $unknown = 1 ] && [ $rc = 2 ]' "$f is refused as an unknown option, exit 2 (exit $rc: $(tail -n 1 <<<"$out"))"
  fi
done
if [ "$mode" = off ]; then
  check '! grep -qi "TESTS ONLY\|test hooks" <<<"$help"' "serve --help says nothing of test hooks"
fi
if command -v nm >/dev/null; then
  syms=$(nm "$bin" 2>/dev/null)
  for s in "${symbols[@]}"; do
    there=0; grep -qw "$s" <<<"$syms" && there=1
    if [ "$mode" = on ]; then check '[ $there = 1 ]' "the binary holds $s"; else check '[ $there = 0 ]' "the binary holds no $s"; fi
  done
fi
echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
