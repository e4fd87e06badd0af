#!/usr/bin/env bash
# The device check of rcomm's GPU point-to-point, on one GPU machine, in under 5 minutes, with
# prebuilt binaries (scripts/gpu-build.sh; no Rust toolchain needed there):
#   scripts/gpu-check.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR defaults to .gpubin, OUT_DIR to ./gpu-check-out. It runs:
#   1. the GPUs rcomm sees (rcomm-topo) and the single-process device-to-device copy baseline;
#   2. rt_gpu's table (sizes 0, 1, 7, 64 KiB + 3, 4 MiB, 256 MiB; plain and stream-ordered;
#      device<->host; a buffer freed and remade; bad input; the IPC caches' counters; free
#      device memory before and after) on 2 and 4 ranks sharing the GPU, and on 2 ranks with
#      RCOMM_P2P_LEVEL=off (host staging);
#   3. a rank killed mid-transfer: PeerLost on the others;
#   4. rcomm-bench pt2pt latency and bandwidth, device buffers against host buffers;
#   5. the device sum kernel (f32, bf16 at 1 GiB), checked bit for bit against the CPU kernel,
#      against the device-to-device copy;
#   6. rt_gpu_coll (every device collective by every algorithm and staged; f32, bf16, f16,
#      i32; 0, 1, 7, 64 Ki + 3 and 16 Mi elements; in place, out of place, stream-ordered;
#      bitwise equality across ranks; grouped send/recv; leaks) on 2 and 4 ranks sharing the
#      GPU, the executor's bytes asserted to move by IPC;
#   7. rcomm-bench coll allreduce --device on 2 and 4 ranks, 8 B to 256 MiB, every device
#      algorithm (nccl-tests' busbw), and NCCL's where libnccl loads (RCOMM_GPU_BACKEND=nccl);
#   8. train3d --device on 8 ranks against its single-process reference.
# Kernels: NVRTC where the machine has it, else the PTX gpu-build.sh wrote (RCOMM_PTX_DIR).
# Every step's output goes to OUT_DIR/gpu-check.log; the summary lines start with "CHECK".
set -uo pipefail
bin=$(cd "${1:-.gpubin}" && pwd)
out=${2:-gpu-check-out}
mkdir -p "$out"
log="$out/gpu-check.log"
: >"$log"
fails=0
run() { # run NAME TIMEOUT CMD...: logs, and counts a failure
    local name=$1 t=$2
    shift 2
    echo "=== $name: $*" >>"$log"
    local s=$SECONDS
    if timeout "$t" "$@" >>"$log" 2>&1; then
        echo "CHECK ok   $name ($((SECONDS - s)) s)" | tee -a "$log"
    else
        echo "CHECK FAIL $name (exit $?, $((SECONDS - s)) s)" | tee -a "$log"
        fails=$((fails + 1))
    fi
}
export RCOMM_TIMEOUT=60
export RCOMM_PTX_DIR="$bin/ptx"
nvidia-smi -L >>"$log" 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv >>"$log" 2>&1 || true
run topo 30 "$bin/rcomm-topo"
run dtod-baseline 60 "$bin/rcomm-bench" dtod --size 256M --iters 20
for n in 2 4; do
    run "p2p-table-$n-ranks" 120 env RCOMM_DEBUG=INFO RCOMM_DEBUG_SUBSYS=NET,P2P \
        "$bin/rcomm-run" -n $n "$bin/rt_gpu" table --big
done
run p2p-table-staged-2-ranks 120 env RCOMM_P2P_LEVEL=off "$bin/rcomm-run" -n 2 "$bin/rt_gpu" table --big
# rcomm-run ends 137 (a rank was SIGKILLed); the check is that both survivors saw PeerLost.
echo "=== kill-mid-transfer" >>"$log"
timeout 60 "$bin/rcomm-run" -n 3 --on-failure continue "$bin/rt_gpu" kill >"$out/kill.txt" 2>&1
cat "$out/kill.txt" >>"$log"
if [ "$(grep -c 'ok kill' "$out/kill.txt")" = 2 ]; then
    echo "CHECK ok   kill-mid-transfer" | tee -a "$log"
else
    echo "CHECK FAIL kill-mid-transfer" | tee -a "$log"
    fails=$((fails + 1))
fi
grep -h "device memory from rank\|ok kill\|device stats\|free device memory" "$log" | sort | uniq | head -40
# OSU methodology (rcomm-bench pt2pt): latency, then bandwidth with OSU's window of 64 up to
# 16 MiB, and at 256 MiB with a window of 4 (rcomm-bench caps buffers at 4 GiB a rank).
run latency-host 60 "$bin/rcomm-run" -n 2 "$bin/rcomm-bench" pt2pt latency -m 1:1M
run latency-device 60 "$bin/rcomm-run" -n 2 "$bin/rcomm-bench" pt2pt latency --device -m 1:1M
run bw-host 90 "$bin/rcomm-run" -n 2 "$bin/rcomm-bench" pt2pt bw -m 1:16M -i 20 -x 2
run bw-device 90 "$bin/rcomm-run" -n 2 "$bin/rcomm-bench" pt2pt bw --device -m 1:16M -i 20 -x 2
run bw-device-256M 60 "$bin/rcomm-run" -n 2 "$bin/rcomm-bench" pt2pt bw --device -m 256M:256M -W 4 -i 20 -x 3
run bw-host-256M 60 "$bin/rcomm-run" -n 2 "$bin/rcomm-bench" pt2pt bw -m 256M:256M -W 4 -i 5 -x 1
# The device reduction kernel against the copy (each byte read and written: 2x; the kernel
# reads two operands and writes one: 3x).
run kernel-sum-f32-1G 60 "$bin/rcomm-bench" dtod --reduce f32 --size 1G --iters 10
run kernel-sum-bf16-1G 60 "$bin/rcomm-bench" dtod --reduce bf16 --size 1G --iters 10
run dtod-1G 60 "$bin/rcomm-bench" dtod --size 1G --iters 10
for n in 2 4; do
    run "coll-table-$n-ranks" 150 env RCOMM_DEBUG=INFO RCOMM_DEBUG_SUBSYS=COLL \
        "$bin/rcomm-run" -n $n "$bin/rt_gpu_coll" --big --expect-ipc
done
for n in 2 4; do
    run "allreduce-device-$n-ranks" 120 "$bin/rcomm-run" -n $n "$bin/rcomm-bench" coll allreduce \
        --device -b 8 -e 256M -f 4 -n 20 -w 5 -A all
    run "allreduce-host-$n-ranks" 60 "$bin/rcomm-run" -n $n "$bin/rcomm-bench" coll allreduce \
        -b 8 -e 256M -f 16 -n 10 -w 3
    run "allreduce-nccl-$n-ranks" 60 env RCOMM_GPU_BACKEND=nccl "$bin/rcomm-run" -n $n \
        "$bin/rcomm-bench" coll allreduce --device -b 8 -e 256M -f 4 -n 20 -w 5
done
run train3d-device-8-ranks 120 "$bin/rcomm-run" -n 8 "$bin/train3d" --device
echo "CHECK done: $fails failed" | tee -a "$log"
[ "$fails" = 0 ]
