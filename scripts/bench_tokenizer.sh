#!/usr/bin/env bash
# Tokenizer encode speed, ours vs HF tokenizers (single-threaded), on >= 10 MB of English and
# >= 10 MB of Chinese text; prints a table and checks that both produced the same ids.
#   usage: scripts/bench_tokenizer.sh AIINFRA_BIN TOKDATA     ($PY: the test venv's python)
set -euo pipefail
bin=${1:?usage: bench_tokenizer.sh AIINFRA_BIN TOKDATA}
tokdata=${2:?usage: bench_tokenizer.sh AIINFRA_BIN TOKDATA}
py=${PY:-python3}
if [ ! -d "$tokdata/hf" ]; then
  echo "bench_tokenizer: $tokdata has no tokenizers (run make data); skipped"
  exit 0
fi
exec env RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false "$py" "$(dirname "$0")/../bench/bench_tokenizer.py" \
  "$bin" "$tokdata" --mb "${BENCH_MB:-10}"
