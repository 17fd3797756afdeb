#!/usr/bin/env bash
# `make run` until the model spine lands: tokenize, detokenize and render a chat template on real files.
set -euo pipefail
bin=$1 tok=$2 shared=$3
prompt=${PROMPT:-"Hello! aiinfra tokenizes 中文, emoji 🙂 and code: for (int i = 0; i < n; i++) {}"}
if [ ! -d "$tok" ]; then
  echo "make run: $tok is missing (../shared/data/tokenizers.tar.xz not found); nothing to demonstrate" >&2
  exit 1
fi
vocab=$tok/hf/llama3
echo "== tokenizer: Llama-3 vocabulary ($vocab)"
echo "text:   $prompt"
ids=$(printf '%s' "$prompt" | "$bin" tokenize -m "$vocab")
echo "ids:    $ids"
echo "count:  $(echo "$ids" | wc -w) tokens for $(printf '%s' "$prompt" | wc -c) bytes"
printf 'back:   '; echo "$ids" | "$bin" detokenize -m "$vocab"; echo
tmpl=$shared/data/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja
if [ -f "$tmpl" ]; then
  msgs=$(mktemp)
  trap 'rm -f "$msgs"' EXIT
  "${PYTHON:-python3}" -c 'import json,sys; print(json.dumps([{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":sys.argv[1]}]))' "$prompt" >"$msgs"
  echo
  echo "== chat template: $(basename "$tmpl") with a generation prompt"
  "$bin" template --template "$tmpl" --messages "$msgs" --add-generation-prompt
  echo
fi
