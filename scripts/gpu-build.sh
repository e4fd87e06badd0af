#!/usr/bin/env bash
# Builds and strips what scripts/gpu-check.sh runs, into one folder (default .gpubin), so a GPU
# machine without a Rust toolchain can run the check: rcomm-run, rcomm-topo, rcomm-bench,
# rt_gpu, rt_gpu_coll, the train3d example, and the device reduction kernels, a CUBIN and PTX
# per architecture of rcomm_kernels::cuda::ARCHS (compiled here with the NVRTC wheel
# scripts/test.sh downloads, for GPU machines without NVRTC: RCOMM_PTX_DIR; the CUBINs load on
# every driver from 12.0 (R525), the PTX (ISA 8.8) only on R575 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpubin}
cargo build --release -p rcomm-launcher -p rcomm-benches -p rcomm-tests \
    --bin rcomm-run --bin rcomm-topo --bin rcomm-bench --bin rt_gpu --bin rt_gpu_coll
cargo build --release -p rcomm-core --example train3d
mkdir -p "$out/ptx"
dir=${CARGO_TARGET_DIR:-target}/release
for b in rcomm-run rcomm-topo rcomm-bench rt_gpu rt_gpu_coll examples/train3d; do
    cp "$dir/$b" "$out/$(basename "$b")"
    strip "$out/$(basename "$b")"
done
nvrtc_dir="${CARGO_TARGET_DIR:-target}/nvrtc"
if [ ! -e "$nvrtc_dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
    mkdir -p "$nvrtc_dir"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$nvrtc_dir" nvidia-cuda-nvrtc-cu12==12.9.86
    python3 -m zipfile -e "$nvrtc_dir"/nvidia_cuda_nvrtc_cu12-*.whl "$nvrtc_dir"
    rm -f "$nvrtc_dir"/nvidia_cuda_nvrtc_cu12-*.whl
fi
LD_LIBRARY_PATH="$(cd "$nvrtc_dir" && pwd)/nvidia/cuda_nvrtc/lib" "$out/rcomm-bench" ptx --out "$out/ptx"
ls -la "$out" "$out/ptx"
