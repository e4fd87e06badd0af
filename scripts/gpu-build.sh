#!/usr/bin/env bash
# Builds and strips what scripts/gpu-check.sh runs, into one folder (default .gpubin), so a GPU
# machine without a Rust toolchain can run the check: rcomm-run, rcomm-topo, rcomm-bench, rt_gpu.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpubin}
cargo build --release -p rcomm-launcher -p rcomm-benches -p rcomm-tests \
    --bin rcomm-run --bin rcomm-topo --bin rcomm-bench --bin rt_gpu
mkdir -p "$out"
dir=${CARGO_TARGET_DIR:-target}/release
for b in rcomm-run rcomm-topo rcomm-bench rt_gpu; do
    cp "$dir/$b" "$out/$b"
    strip "$out/$b"
done
ls -la "$out"
