#!/usr/bin/env bash
# Creates the reference-test virtual environment (HF tokenizers, transformers, tiktoken,
# pytest) once per requirements file; later runs and fresh clones reuse it and pip's cache.
set -euo pipefail
venv=$1 req=$2
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
touch "$venv/.ok"
