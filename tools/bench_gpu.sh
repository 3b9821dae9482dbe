#!/usr/bin/env bash
# The benchmark harness on an NVIDIA GPU machine that has torch, jax and the
# jax CUDA PJRT plugin preinstalled and no network (docs/BENCHMARKS.md).
# Builds the extension against that machine's torch with CMake directly (no
# pip, no download: the PJRT C API header comes along in .deps/include,
# fetched by `make build` on a networked machine), then runs the harness
# with the device on the CUDA plugin against torch CUDA eager and inductor
# on the same GPU. Extra arguments go to the harness (e.g. --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -f .deps/include/xla/pjrt/c/pjrt_c_api.h ]; then
  echo "bench_gpu: .deps/include is missing; run 'make build' on a networked machine and bring it" >&2
  exit 2
fi
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || { echo "bench_gpu: $tool is not installed" >&2; exit 2; }
done
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTORCH_PJRT_BUILD_PYTHON=ON \
  -DTORCH_PJRT_BUILD_TESTS=OFF -DPython3_EXECUTABLE="$(command -v "$PY")" >/dev/null
ninja -C build/gpu -j"$(nproc)" >/dev/null
cp build/gpu/csrc/backend/_C*.so python/torch_pjrt/
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" TORCH_PJRT_PLUGIN=cuda HF_HUB_OFFLINE=1
"$PY" -c "import torch, torch_pjrt; print(torch.__version__, torch_pjrt.runtime.info()['platform_name'], torch.cuda.get_device_name())"
exec timeout 470 "$PY" -m torch_pjrt.bench \
  --modes cpu_eager,cuda_eager,cuda_inductor,tpu_strict,tpu_compiled --plot "$@"
