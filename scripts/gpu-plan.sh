#!/usr/bin/env bash
# One device call's plan, run ON the GPU machine from the repository root over binaries built here:
#   here:   make -j2 gpu && bash scripts/gpu-bundle.sh [PARTS...]   (build/gpu.tar.xz)
#   there:  LIMIT=540 bash scripts/gpu-plan.sh PLAN.sh               (device tool: carry build/gpu.tar.xz
#                                                                     and the plan file)
# The plan is a bash file sourced after these helpers are defined, so it lists the measurements in the
# order that matters (device time is scarce: the most important first):
#   t TESTBIN [TEST] [TIMEOUT]    a GPU test binary (build/gpu/tests/TESTBIN), optionally one cmocka test
#                                 (its full name), its last lines printed
#   b LABEL [VAR=VALUE...] -- ARGS  `aiinfra bench --arch llama3-8b --random-weights ARGS --json` with the
#                                 environment given, appended to $OUT/bench.jsonl with its label, and one
#                                 summary line printed
#   left                          seconds left of LIMIT (plans skip what no longer fits: [ $(left) -gt 60 ])
#   h200                          true on an H200 (for plans that differ by card)
# Writes to $OUT (the device tool's output folder; build/gpu-out here).
set -uo pipefail
plan=${1:?usage: scripts/gpu-plan.sh PLAN.sh}
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
start=$(date +%s)
LIMIT=${LIMIT:-540}
left() { echo $((LIMIT - ($(date +%s) - start))); }
h200() { nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader

t() {
  local bin=$G/tests/$1 filter=${2:-} to=${3:-300} log=$OUT/test_$1${2:+_$2}.log
  echo "== test $1 ${filter}"
  CUDA_TEST_FILTER=$filter timeout "$to" "$bin" >"$log" 2>&1
  echo "rc=$?"
  tail -n 6 "$log"
}

b() {
  local label=$1 env=()
  shift
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do env+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local line
  line=$(env "${env[@]}" timeout 300 $G/bin/aiinfra bench --arch llama3-8b --random-weights "$@" --json 2>>"$OUT/bench.err" |
         tail -n 1)
  echo "{\"label\": \"$label\", \"result\": ${line:-null}}" >>"$OUT/bench.jsonl"
  echo "$label: $(echo "$line" | python3 -c 'import json,sys
try:
    d = json.load(sys.stdin)
    print(" ".join(f"{k}={d[k]}" for k in ("decode_tok_s", "decode_ms_per_step", "decode_frac_of_bound", "copy_gb_s", "fuse") if k in d))
except Exception as e:
    print("no result", e)')"
}

# shellcheck source=/dev/null
source "$plan"
echo "plan done, $(left) s of $LIMIT left"
