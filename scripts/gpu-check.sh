#!/usr/bin/env bash
# GPU check, run ON the GPU machine from the repository root, over binaries built here:
#   here:   make -j2 gpu && scripts/gpu-bundle.sh          (fills build/gpu)
#   there:  scripts/gpu-check.sh [tests|parity|bench|all] [extra aiinfra-bench configs...]
#           scripts/gpu-check.sh profile [fusion sets...]  (ncu, one decode step per set: ncu_step.py;
#           PROFILE_ARGS="--dtype q4_0 --batch 8" for another configuration)
#           (device tool: carry build/gpu.tar.xz, unpacked here when build/gpu is absent or older);
#           SANITIZE=0 skips compute-sanitizer, BENCH_KERNELS=0 the kernel benches
# Writes to $OUT (or build/gpu-out): tests.log (every GPU test), sanitizer.log (compute-sanitizer
# memcheck + racecheck on the kernel tests), kernels.log (kernel benchmarks), bench.jsonl (one
# `aiinfra bench --json` line per configuration), and prints a short table last.
set -uo pipefail
what=${1:-all}
[ $# -gt 0 ] && shift
# shellcheck source=scripts/gpu-env.sh
source "$(dirname "$0")/gpu-env.sh"
summary=$OUT/summary.txt
: >"$summary"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,power.draw --format=csv,noheader | tee -a "$summary"

if [ "$what" = tests ] || [ "$what" = all ]; then
  : >"$OUT/tests.log"
  for t in $G/tests/test_cuda_*; do
    [ -x "$t" ] || continue
    timeout 300 "$t" >>"$OUT/tests.log" 2>&1
    rc=$?
    echo "test $(basename "$t"): rc=$rc $(grep -cE '^\[       OK \]' "$OUT/tests.log") ok so far" | tee -a "$summary"
  done
  grep -E '^\[  (FAILED|PASSED|SKIPPED) \]|worst relative|error|Error' "$OUT/tests.log" | head -40 | tee -a "$summary"
  if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    : >"$OUT/sanitizer.log"
    for t in ${SANITIZE_TESTS:-$G/tests/test_cuda_ops $G/tests/test_cuda_gemv $G/tests/test_cuda_attention $G/tests/test_cuda_ladders}; do
      [ -x "$t" ] || continue
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
        timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$t" >>"$OUT/sanitizer.log" 2>&1
        echo "sanitizer $tool $(basename "$t"): rc=$?" | tee -a "$summary"
      done
    done
  fi
fi

if [ "$what" = parity ] || [ "$what" = all ]; then
  # 1B-scale parity against HF transformers/PyTorch (needs torch + transformers: the GPU machine has them)
  if [ -f $G/fixture/llama3-tokenizer/tokenizer.json ]; then
    mkdir -p /tmp/aiinfra-parity
    timeout 300 python3 scripts/gpu_hf_parity.py $G/bin/aiinfra $G/fixture/llama3-tokenizer /tmp/aiinfra-parity \
      2>&1 | grep -v Warning | tee -a "$summary"
  fi
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  : >"$OUT/kernels.log"
  if [ "${BENCH_KERNELS:-1}" = 1 ]; then
    for b in $G/bench/bench_cuda_*; do
      [ -x "$b" ] && timeout 180 "$b" >>"$OUT/kernels.log" 2>&1
    done
    timeout 180 $G/bench/bench_cuda_gemv 20 split >>"$OUT/kernels.log" 2>&1  # split-K GEMV table (docs/gpu.md)
    timeout 180 $G/bin/aiinfra kernels bench all >>"$OUT/kernels.log" 2>&1   # the ladders (docs/kernels/)
    # the Hopper prefill (k_attn_prefill_hopper.cu) in the attention ladder's v3_backend row: A/B with the line above
    echo "== AIINFRA_PREFILL=fa3 v3_backend ==" >>"$OUT/kernels.log"
    AIINFRA_PREFILL=fa3 AIINFRA_ATTN_VERSIONS=v3_backend timeout 120 $G/bin/aiinfra kernels bench attention >>"$OUT/kernels.log" 2>&1
  fi
  : >"$OUT/bench.jsonl"
  configs=("--arch llama3-8b --random-weights --dtype bf16 --batch 1 --prompt 512 --gen 128"
           "--arch llama3-8b --random-weights --dtype bf16 --batch 1 --prompt 512 --gen 128 --fuse all"
           "--arch llama3-8b --random-weights --dtype bf16 --batch 1 --prompt 512 --gen 128 --fuse defer"
           "--arch llama3-8b --random-weights --dtype bf16 --batch 1 --prompt 512 --gen 128 --fuse defer,glu,rope"
           "--arch llama3-8b --random-weights --dtype q4_0 --batch 1 --prompt 512 --gen 128"
           "--arch llama3-8b --random-weights --dtype bf16 --batch 8 --prompt 1024 --gen 64"
           "--arch llama3-8b --random-weights --dtype bf16 --batch 8 --prompt 1024 --gen 64 --fuse defer,swiglu"
           "--arch llama3-8b --random-weights --dtype bf16 --batch 64 --prompt 1024 --gen 64"
           "--arch llama3-8b --random-weights --dtype bf16 --batch 256 --prompt 1024 --gen 32"
           "$@")
  for c in "${configs[@]}"; do
    [ -n "$c" ] || continue
    # shellcheck disable=SC2086
    timeout 240 $G/bin/aiinfra bench $c --json >>"$OUT/bench.jsonl" 2>>"$OUT/kernels.log" || echo "bench failed: $c" | tee -a "$summary"
  done
  python3 - "$OUT/bench.jsonl" <<'PY' | tee -a "$summary"
import json, sys
print(f"{'config':60} {'prefill tok/s':>13} {'of bound':>8} {'decode tok/s':>12} {'ms/step':>8} {'of bound':>8}")
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except Exception: continue
    name = f"{r['model']} {r['dtype']} b{r['batch']} p{r['prompt']} g{r['gen']} fuse {r['fuse']}"
    print(f"{name:60} {r['prefill_tok_s']:13.0f} {r['prefill_frac_of_bound']:8.2f} {r['decode_tok_s']:12.1f} "
          f"{r['decode_ms_per_step']:8.3f} {r['decode_frac_of_bound']:8.2f}   copy {r['copy_gb_s']:.0f} GB/s, mm {r['matmul_tflop_s']:.0f} TF/s")
PY
  grep -E 'ratio|TB/s|GB/s' "$OUT/kernels.log" | tail -30
fi

# profile: one decode step kernel by kernel (Nsight Compute, each kernel alone; scripts/ncu_step.py),
# bf16 Llama-3-8B shape at batch 1 with the default fusions and with --fuse none (or the sets given);
# PROFILE_ARGS replaces "--dtype bf16 --batch 1" (e.g. "--dtype q4_0 --batch 8"). The launch count covers
# the two prefill passes and three decode steps of 8 sequences of 64 tokens (with 1400, a q4_0 batch-8 run
# stopped inside the decode steps and the table showed the prefill's kernels)
if [ "$what" = profile ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  sets=("$@"); [ ${#sets[@]} -eq 0 ] && sets=(default none)
  read -r -a pa <<<"${PROFILE_ARGS:---dtype bf16 --batch 1}"
  for f in "${sets[@]}"; do
    fa=(); [ "$f" != default ] && fa=(--fuse "$f")
    timeout 300 "$NCU" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
      --print-units base --launch-count 2400 $G/bin/aiinfra bench --arch llama3-8b --random-weights \
      "${pa[@]}" --prompt 64 --gen 3 "${fa[@]}" >"$OUT/ncu_$f.csv" 2>>"$OUT/ncu.err" ||
      echo "ncu failed: $f" | tee -a "$summary"
    python3 scripts/ncu_step.py "$OUT/ncu_$f.csv" | tee -a "$summary"
  done
fi
