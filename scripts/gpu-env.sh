# Sourced on the GPU machine by scripts/gpu-check.sh and scripts/gpu-plan.sh (repository root): OUT (made;
# the device tool's output folder, else build/gpu-out), G = build/gpu (unpacked afresh from
# build/gpu.tar.xz, scripts/gpu-bundle.sh, when that is newer), its libraries on LD_LIBRARY_PATH and its
# real-weights fixture in AIINFRA_GPU_GGUF.
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
G=build/gpu
if [ -f build/gpu.tar.xz ] && { [ ! -d $G ] || [ build/gpu.tar.xz -nt $G ]; }; then
  rm -rf $G && tar -C build -xJf build/gpu.tar.xz
fi
export LD_LIBRARY_PATH=$PWD/$G/lib:${LD_LIBRARY_PATH:-}
[ -f $G/fixture/smollm2-8l.gguf ] && export AIINFRA_GPU_GGUF=$G/fixture/smollm2-8l.gguf
