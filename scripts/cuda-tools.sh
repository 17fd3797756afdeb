#!/usr/bin/env bash
# Fetches cuobjdump and nvdisasm (SASS disassembly; some CUDA toolkit installs, CI's among them, ship
# without them) from NVIDIA's PyPI wheels, pinned by version and sha256, into DIR/bin once:
#   scripts/cuda-tools.sh PIP DIR      (PIP: the test venv's pip; prints DIR/bin/cuobjdump)
# Used by tests/py/test_sass_*.py through the Makefile (CUOBJDUMP); a failed fetch leaves nothing and
# those tests skip with one line.
set -euo pipefail
pip=$1 dir=$2
if [ ! -x "$dir/bin/cuobjdump" ] || [ ! -x "$dir/bin/nvdisasm" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cat >"$tmp/req.txt" <<'REQ'
nvidia-cuda-cuobjdump==13.5.37 --hash=sha256:38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58
nvidia-cuda-nvdisasm==13.5.37 --hash=sha256:d3fdbdd49fa53e2e4aacd3db8259d052bd2b049ececdcb69e92e083c6728e7ca
REQ
  "$pip" download -q --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: \
    --platform manylinux_2_17_x86_64 -r "$tmp/req.txt" -d "$tmp/whl" >&2
  mkdir -p "$tmp/x" "$dir/bin"
  for w in "$tmp"/whl/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
  install -m 755 "$tmp"/x/nvidia/cu13/bin/cuobjdump "$tmp"/x/nvidia/cu13/bin/nvdisasm "$dir/bin/"
fi
echo "$dir/bin/cuobjdump"
