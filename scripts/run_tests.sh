#!/usr/bin/env bash
# Runs every test and prints one closing line "N passed, N failed[, N skipped]".
#   C unit tests (cmocka, built with ASan/UBSan): the binaries given as arguments.
#   Parity tests (pytest, tests/py) against HF tokenizers/transformers, tiktoken, llama.cpp's
#   golden files, driving the ASan-built CLI ($AIINFRA_BIN).
set -uo pipefail
passed=0 failed=0 skipped=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in "$@"; do
  CMOCKA_MESSAGE_OUTPUT=stdout "$t" >"$log" 2>&1
  rc=$?
  cat "$log"
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
  if [ $rc -ne 0 ] && [ "${f:-0}" -eq 0 ]; then
    echo "FAIL: $t exited $rc (crash or sanitizer report)"; failed=$((failed + 1))
  fi
done
if [ -d tests/py ] && ls tests/py/test_*.py >/dev/null 2>&1; then
  "$PY" -m pytest -q -p no:cacheprovider tests/py 2>&1 | tee "$log"
  line=$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1)
  for k in passed failed skipped error errors; do
    n=$(echo "$line" | grep -oE "[0-9]+ $k\b" | grep -oE '^[0-9]+')
    case $k in
      passed) passed=$((passed + ${n:-0}));;
      failed|error|errors) failed=$((failed + ${n:-0}));;
      skipped) skipped=$((skipped + ${n:-0}));;
    esac
  done
  [ -z "$line" ] && { echo "FAIL: pytest printed no summary"; failed=$((failed + 1)); }
fi
echo
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
