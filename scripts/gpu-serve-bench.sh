#!/usr/bin/env bash
# Serving benchmark ON the GPU machine (issue 5): a Llama-3-8B-shaped model with random bf16 weights behind
# `aiinfra serve --backend cuda`, loaded by `aiinfra bench serve` (random dataset, input 512 / output 256).
#   scripts/gpu-serve-bench.sh [NUM_PROMPTS] [MAX_CONCURRENCY] [RATE]     (defaults 1000 256 inf)
# Needs build/gpu from scripts/gpu-bundle.sh (binaries, libraries, the Llama-3 tokenizer). Writes
# $OUT/serve.json (the load generator's JSON), $OUT/serve.log (server log + /metrics at the end).
set -uo pipefail
G=${G:-build/gpu}
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$G/lib:${LD_LIBRARY_PATH:-}
n=${1:-1000} c=${2:-256} rate=${3:-inf} port=18080
t0=$(date +%s.%N)
$G/bin/aiinfra serve --arch llama3-8b --random-weights --dtype bf16 --tokenizer $G/fixture/llama3-tokenizer \
  --backend cuda --port $port --max-num-seqs "$c" --max-num-batched-tokens 8192 --ctx 2048 ${SERVE_ARGS:-} >"$OUT/serve.log" 2>&1 &
pid=$!
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
t1=$(date +%s.%N)
echo "server ready after $(awk "BEGIN{print $t1 - $t0}") s (process start to /health)" | tee -a "$OUT/serve.log"
# time from process start to the first served token
curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Hello", "max_tokens": 1, "temperature": 0}' >/dev/null
echo "first token served after $(awk "BEGIN{print $(date +%s.%N) - $t0}") s" | tee -a "$OUT/serve.log"
$G/bin/aiinfra bench serve --url "http://127.0.0.1:$port" --dataset random --input-len 512 --output-len 256 \
  --num-prompts "$n" --request-rate "$rate" --max-concurrency "$c" --json >"$OUT/serve.json" 2>>"$OUT/serve.log"
echo "bench serve exit $?"
curl -s "http://127.0.0.1:$port/metrics" >>"$OUT/serve.log"
kill -TERM $pid; wait $pid
echo "server exit $?"
python3 -c "import json,sys; r=json.load(open('$OUT/serve.json')); print({k: r[k] for k in list(r)[:30]})"
