#!/usr/bin/env bash
# Packs what a GPU machine needs into build/gpu (carry that one folder; see scripts/gpu-check.sh):
#   bin/aiinfra, tests/test_cuda_*, bench/bench_cuda_*   release builds, debug info stripped (size)
#   lib/   the shared libraries they need beyond glibc and the CUDA driver (the GPU machine has the
#          CUDA toolkit but none of our Debian -dev packages)
#   fixture/smollm2-8l.gguf   real weights for the GPU-vs-CPU test (scripts/make_gpu_fixture.py), when
#          the default model is in the cache; fixture/llama3-tokenizer for scripts/gpu_hf_parity.py
# build/gpu-libs gets the same libraries, for running build/tests/* in place.
# build/gpu.tar.xz: the same folder compressed (~42 MB against ~80 MB): what to carry to a machine
# that takes at most 64 MiB of files (scripts/gpu-check.sh unpacks it when build/gpu is missing).
# Arguments: the parts of build/gpu to put in the tarball (default: all of it), for a call that needs
# less than everything, e.g. `scripts/gpu-bundle.sh bin lib bench/bench_cuda_gemv tests/test_cuda_gemv`
# (the whole folder reached 60 MB in December 2026, and the working tree counts against the 64 MiB too).
set -euo pipefail
g=build/gpu
rm -rf "$g"
mkdir -p "$g/bin" "$g/tests" "$g/bench" "$g/lib" "$g/fixture" build/gpu-libs
bins=$(ls build/aiinfra build/tests/test_cuda_* build/bench/bench_cuda_* 2>/dev/null | grep -v '\.d$' || true)
for b in $bins; do
  case $b in
    build/aiinfra) d=$g/bin ;;
    build/tests/*) d=$g/tests ;;
    *) d=$g/bench ;;
  esac
  strip --strip-debug -o "$d/$(basename "$b")" "$b"
  ldd "$b" 2>/dev/null | awk '/=> \//{print $3}' |
    grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libresolv|ld-linux[^/]*|libcu[A-Za-z]*|libnv[A-Za-z]*)\.so' || true
done | sort -u | while read -r lib; do cp -L "$lib" "$g/lib/"; cp -L "$lib" build/gpu-libs/; done
model=${AIINFRA_CACHE:-$HOME/.cache/aiinfra}/SmolLM2-135M-Instruct.Q4_1.gguf
venv=$(ls -d "$HOME"/.cache/aiinfra/venv-*/ 2>/dev/null | head -1 || true) # none on a fresh machine
if [ -f "$model" ] && [ -n "$venv" ]; then
  [ -f build/gpu-fixture/smollm2-8l.gguf ] || { mkdir -p build/gpu-fixture &&
    "$venv/bin/python" scripts/make_gpu_fixture.py "$model" build/gpu-fixture/smollm2-8l.gguf; }
  cp build/gpu-fixture/smollm2-8l.gguf "$g/fixture/"
fi
tok=build/data/tokenizers/hf/llama3 # the real Llama-3 tokenizer (make data), for scripts/gpu_hf_parity.py
if [ -f $tok/tokenizer.json ]; then
  mkdir -p "$g/fixture/llama3-tokenizer" && cp $tok/tokenizer.json $tok/tokenizer_config.json "$g/fixture/llama3-tokenizer/"
fi
parts=(gpu)
[ $# -gt 0 ] && parts=("${@/#/gpu/}")
tar -C build -cf - "${parts[@]}" | xz -6 -T0 >build/gpu.tar.xz
du -sh "$g" build/gpu.tar.xz
