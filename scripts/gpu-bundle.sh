#!/usr/bin/env bash
# Copies the shared libraries our release binaries need (beyond glibc and the CUDA driver) into
# build/gpu-libs, so build/aiinfra, build/tests/test_cuda_* and build/bench/* can run on the GPU
# machine, which has the CUDA toolkit but none of our Debian -dev packages. Carry build/gpu-libs and
# set LD_LIBRARY_PATH=build/gpu-libs there (scripts/gpu-check.sh does).
set -euo pipefail
out=build/gpu-libs
mkdir -p "$out"
bins=$(ls build/aiinfra build/tests/test_cuda_* build/bench/* 2>/dev/null || true)
for b in $bins; do
  ldd "$b" 2>/dev/null | awk '/=> \//{print $3}' | grep -E 'pcre2|cjson|utf8proc|xxhash|cmocka' || true
done | sort -u | while read -r lib; do cp -L "$lib" "$out/"; done
ls "$out"
