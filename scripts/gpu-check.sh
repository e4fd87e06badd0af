#!/usr/bin/env bash
# The device check of rcomm on one GPU machine, within 6 minutes, with prebuilt binaries
# (scripts/gpu-build.sh; no Rust toolchain needed there):
#   scripts/gpu-check.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR defaults to .gpubin, OUT_DIR to ./gpu-check-out; GPU_CHECK_BUDGET (seconds, default
# 360) is the whole run's deadline. Each step's timeout is the smaller of its own limit and the
# time left; a step that would start with less than its minimum left is "SKIP (deadline)". The
# steps, most telling first:
#   topo          the GPUs rcomm sees (rcomm-topo)
#   kernel-f32    the device sum kernel at 256 MiB, checked bit for bit against the CPU kernel:
#                 the first load of the reduction kernels (which image: CUBIN or PTX, logged)
#   dtod          the in-process device-to-device copy at 256 MiB: the baseline
#   p2p           rcomm-bench pt2pt bw --device at 256 MiB on 2 ranks sharing the GPU, as % of
#                 the copy; again under MPS (p2p-mps) where nvidia-cuda-mps-control exists,
#                 the daemon started for the step and stopped after, even on failure
#   p2p-staged    the same at 64 MiB with RCOMM_P2P_LEVEL=off: staged through pinned host
#                 buffers, chunks chained by events on the per-peer copy streams
#   rt_gpu        rt_gpu's table on 2 ranks, with its 256 MiB sizes (--big)
#   rt_gpu_coll   every device collective by every algorithm on 2 ranks (--big), IPC asserted
#   allreduce     rcomm-bench coll allreduce --device at 256 MiB on 2 ranks (busbw)
#   pool          rt_gpu_coll --pool --big: allreduce on cuMemAllocAsync memory, to 256 MiB
#   graph         rt_gpu_coll --graph: a stream-ordered allreduce captured in a CUDA graph,
#                 launched 3 times (a capture that fails is a FINDING, not a failure)
#   nccl-1/nccl-2 RCOMM_GPU_BACKEND=nccl allreduce at 256 MiB on 1 rank, and on 2 ranks
#                 sharing the GPU (NCCL refuses that: whatever happens is recorded), where
#                 libnccl.so.2 loads
# Kernels: NVRTC where the machine has it, else what gpu-build.sh wrote (RCOMM_PTX_DIR: a CUBIN
# per architecture, preferred, and PTX). Every step's output is OUT_DIR/<step>.txt and
# OUT_DIR/gpu-check.log; the end is one table: step, result, seconds, key figure.
set -uo pipefail
bin=$(cd "${1:-.gpubin}" && pwd) || exit 2
out=${2:-gpu-check-out}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
log="$out/gpu-check.log"
: >"$log"
budget=${GPU_CHECK_BUDGET:-360}
# Kept back for stopping MPS and printing the table.
deadline=$((SECONDS + budget - 10))
fails=0
rows=()
copy_gbps=

export RCOMM_TIMEOUT=60
export RCOMM_PTX_DIR="$bin/ptx"

row() { # row STEP RESULT SECONDS FIGURE
    rows+=("$1|$2|$3|$4")
    echo "CHECK $2 $1 ($3 s): $4" >>"$log"
}

# step NAME MIN MAX FIGURE CMD...: runs CMD with a timeout of min(MAX, time left), or records
# "SKIP (deadline)" when less than MIN seconds are left. FIGURE is a function given the
# step's output file; it prints the key figure.
step() {
    local name=$1 min=$2 max=$3 fig=$4
    shift 4
    local left=$((deadline - SECONDS))
    if [ "$left" -lt "$min" ]; then
        row "$name" "SKIP (deadline)" 0 "${left}s left, needs ${min}s"
        return 0
    fi
    local t=$max
    [ "$t" -gt "$left" ] && t=$left
    local o="$out/$name.txt" s=$SECONDS rc
    echo "=== $name (timeout ${t}s): $*" >>"$log"
    # Without rcomm-run's "[rank] " prefixes, so the figures parse the same with and without it.
    timeout -k 3 "$t" "$@" 2>&1 | sed -E 's/^\[[0-9]+\] //' >"$o"
    rc=${PIPESTATUS[0]}
    cat "$o" >>"$log"
    local took=$((SECONDS - s)) figure
    figure=$("$fig" "$o" 2>/dev/null | head -n 1)
    figure=${figure:--}
    if [ "$rc" = 0 ] && grep -q '^finding ' "$o"; then
        row "$name" FINDING "$took" "$(grep -m 1 '^finding ' "$o" | cut -c 1-100)"
    elif [ "$rc" = 0 ] && grep -q '^skip ' "$o"; then
        row "$name" SKIP "$took" "$(grep -m 1 '^skip ' "$o" | cut -c 1-100)"
    elif [ "$rc" = 0 ]; then
        row "$name" ok "$took" "$figure"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        row "$name" "FAIL (timeout ${t}s)" "$took" "$figure"
        fails=$((fails + 1))
    else
        row "$name" "FAIL (exit $rc)" "$took" "$(grep -m 1 -i 'error\|panicked' "$o" | cut -c 1-100)"
        fails=$((fails + 1))
    fi
}

# Key figures, each from a step's output file.
fig_none() { :; }
fig_topo() {
    local n cc drv
    n=$(sed -n 's/.*CUDA GPUs[^:]*: //p' "$1" | head -n 1)
    cc=$(grep -m 1 -o 'compute capability [0-9.]*' "$1")
    drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
    echo "GPUs: ${n:-?}; ${cc:-?}; driver ${drv:-?}"
}
fig_oks() { echo "$(grep -c '^ok ' "$1") cases ok"; }
fig_copy() { sed -n 's/^bandwidth, bytes counted once: \([0-9.]*\) GB\/s.*/\1 GB\/s/p' "$1"; }
fig_kernel() {
    local k bw
    k=$(grep -m 1 -o 'device kernels[^"]*' "$1" | cut -c 1-60)
    bw=$(sed -n 's/^bandwidth, bytes read + written (3x): \([0-9.]*\) GB\/s.*/\1 GB\/s r+w/p' "$1")
    echo "${bw:-?}; ${k:-image not logged}"
}
fig_p2p() { # the last OSU row, in GB/s and as % of the in-process copy
    awk -v copy="${copy_gbps:-0}" '!/^#/ && NF == 2 { v = $2 } END {
        if (v == "") exit 1
        if (copy > 0) printf "%.1f GB/s = %.0f%% of copy\n", v / 1000, 100 * v / 1000 / copy
        else printf "%.1f GB/s\n", v / 1000 }' "$1"
}
fig_busbw() { sed -n 's/^# *Avg bus bandwidth *: *\([0-9.]*\).*/busbw \1 GB\/s/p' "$1"; }

{
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
} >>"$log" 2>&1 || true

step topo 5 20 fig_topo "$bin/rcomm-topo"
step kernel-f32 10 40 fig_kernel env RCOMM_DEBUG=INFO RCOMM_DEBUG_SUBSYS=COLL \
    "$bin/rcomm-bench" dtod --reduce f32 --size 256M --iters 10
step dtod 10 30 fig_copy "$bin/rcomm-bench" dtod --size 256M --iters 20
copy_gbps=$(fig_copy "$out/dtod.txt" 2>/dev/null | awk '{ print $1 }')
p2p=("$bin/rcomm-bench" pt2pt bw --device -m 256M:256M -W 4 -i 20 -x 3)
step p2p 15 45 fig_p2p "$bin/rcomm-run" -n 2 "${p2p[@]}"
# The same through host memory (RCOMM_P2P_LEVEL=off): 1 MiB chunks copied out on the sender's
# copy stream and in by async copies chained on the receiver's, at 64 MiB.
step p2p-staged 10 30 fig_p2p env RCOMM_P2P_LEVEL=off "$bin/rcomm-run" -n 2 \
    "$bin/rcomm-bench" pt2pt bw --device -m 64M:64M -W 4 -i 10 -x 2

if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    # A private daemon: its pipe and log folders under OUT_DIR, so a system one is untouched.
    export CUDA_MPS_PIPE_DIRECTORY="$out/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$out/mps-log"
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    mps_stop() {
        echo quit | timeout 10 nvidia-cuda-mps-control >>"$log" 2>&1 || true
        trap - EXIT INT TERM
    }
    trap 'mps_stop; exit 130' INT TERM
    trap mps_stop EXIT
    if nvidia-cuda-mps-control -d >>"$log" 2>&1; then
        step p2p-mps 15 45 fig_p2p "$bin/rcomm-run" -n 2 "${p2p[@]}"
    else
        row p2p-mps "FAIL (MPS did not start)" 0 "see $log"
        fails=$((fails + 1))
    fi
    mps_stop
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else
    row p2p-mps SKIP 0 "no nvidia-cuda-mps-control"
fi

step rt_gpu 20 75 fig_oks env RCOMM_DEBUG=INFO RCOMM_DEBUG_SUBSYS=NET,P2P \
    "$bin/rcomm-run" -n 2 "$bin/rt_gpu" table --big
step rt_gpu_coll 30 100 fig_oks env RCOMM_DEBUG=INFO RCOMM_DEBUG_SUBSYS=COLL \
    "$bin/rcomm-run" -n 2 "$bin/rt_gpu_coll" --big --expect-ipc
step allreduce 15 40 fig_busbw "$bin/rcomm-run" -n 2 "$bin/rcomm-bench" coll allreduce \
    --device -b 256M -e 256M -n 10 -w 3
step pool 15 40 fig_oks "$bin/rcomm-run" -n 2 "$bin/rt_gpu_coll" --pool --big
step graph 10 30 fig_oks "$bin/rcomm-run" -n 2 "$bin/rt_gpu_coll" --graph --big

nccl_loads() {
    python3 -c 'import ctypes; ctypes.CDLL("libnccl.so.2")' >/dev/null 2>&1 ||
        ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'
}
if nccl_loads; then
    step nccl-1 15 40 fig_busbw env RCOMM_GPU_BACKEND=nccl "$bin/rcomm-run" -n 1 \
        "$bin/rcomm-bench" coll allreduce --device -b 256M -e 256M -n 10 -w 3
    # NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): recorded, not counted.
    f=$fails
    step nccl-2-same-gpu 10 30 fig_busbw env RCOMM_GPU_BACKEND=nccl "$bin/rcomm-run" -n 2 \
        "$bin/rcomm-bench" coll allreduce --device -b 256M -e 256M -n 10 -w 3
    if [ "$fails" != "$f" ]; then
        fails=$f
        last=$((${#rows[@]} - 1))
        IFS='|' read -r n r t _ <<<"${rows[$last]}"
        why=$(grep -m 1 -i 'duplicate\|nccl\|error' "$out/nccl-2-same-gpu.txt" | cut -c 1-100)
        r=${r#FAIL (}
        rows[last]="$n|FINDING (${r%)})|$t|${why:--}"
    fi
else
    row nccl-1 SKIP 0 "libnccl.so.2 does not load"
    row nccl-2-same-gpu SKIP 0 "libnccl.so.2 does not load"
fi

{
    printf '\n%-16s %-22s %7s  %s\n' step result seconds "key figure"
    for r in "${rows[@]}"; do
        IFS='|' read -r n res t f <<<"$r"
        printf '%-16s %-22s %7s  %s\n' "$n" "$res" "$t" "$f"
    done
    printf '%-16s %-22s %7s  %s\n' total "$fails failed" "$SECONDS" "budget ${budget}s"
} | tee -a "$log"
[ "$fails" = 0 ]
