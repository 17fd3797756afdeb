#!/usr/bin/env bash
# CPU serving comparison on this machine: SmolLM2-135M-Instruct Q4_1 behind `aiinfra serve --backend cpu` and
# behind llama.cpp's server (llama-cpp-python[server] in ~/.cache/aiinfra/venv-llama), each loaded by
# `aiinfra bench serve` at 1, 8 and 32 concurrent streams (llama.cpp's server runs one request at a time;
# --interrupt_requests False keeps it from cutting a running request short when the next one arrives) (random prompts of 64 words, 32 output tokens, 2 x C requests).
#   scripts/bench_serve_cpu.sh [THREADS]      prints one line per (server, concurrency), JSON in build/bench-serve/
set -uo pipefail
threads=${1:-$(nproc)}
model=${AIINFRA_CACHE:-$HOME/.cache/aiinfra}/SmolLM2-135M-Instruct.Q4_1.gguf
py=$HOME/.cache/aiinfra/venv-llama/bin/python
out=build/bench-serve
mkdir -p "$out"
[ -f "$model" ] || { echo "no model: scripts/fetch_model.sh"; exit 1; }
wait_up() { for _ in $(seq 300); do curl -sf "http://127.0.0.1:$1/v1/models" >/dev/null && return 0; sleep 0.2; done; return 1; }
run_load() { # name port
  for c in 1 8 32; do
    n=$((c * 2)); [ $n -lt 4 ] && n=4
    build/aiinfra bench serve --url "http://127.0.0.1:$2" --dataset random --input-len 64 --output-len 32 \
      --num-prompts $n --max-concurrency $c --request-rate inf --json >"$out/$1-c$c.json" 2>/dev/null
    python3 -c "import json,sys; r=json.load(open('$out/$1-c$c.json')); print('%-10s c=%-3d done %4d/%-4d out %7.1f tok/s  TTFT p50 %7.1f ms  TPOT p50 %6.1f ms' % ('$1', $c, r['completed'], r['num_prompts'], r['output_throughput'], r['median_ttft_ms'], r['median_tpot_ms']))"
  done
}
build/aiinfra serve -m "$model" --backend cpu -t "$threads" --port 18201 --max-num-seqs 32 --ctx 512 >"$out/aiinfra.log" 2>&1 &
pid=$!
wait_up 18201 && run_load aiinfra 18201
kill -TERM $pid; wait $pid 2>/dev/null
if [ -x "$py" ] && "$py" -c 'import llama_cpp.server' 2>/dev/null; then
  "$py" -m llama_cpp.server --model "$model" --n_threads "$threads" --n_ctx 4096 --interrupt_requests False --port 18202 >"$out/llamacpp.log" 2>&1 &
  pid=$!
  wait_up 18202 && run_load llama.cpp 18202
  kill -TERM $pid; wait $pid 2>/dev/null
else
  echo "llama-cpp-python[server] not in $py: ~/.cache/aiinfra/venv-llama/bin/pip install 'llama-cpp-python[server]==0.3.36'"
fi
