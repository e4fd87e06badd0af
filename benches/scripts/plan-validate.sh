#!/usr/bin/env bash
# plan-validate.sh — the collectives rcomm-plan prices, measured on this machine, against what
# its formulas predict from this machine's link (α, β) and reduction rate (γ).
#
#   benches/scripts/plan-validate.sh [RANKS] [SIZES] [REPS]   default: "2 4 8" "8 64K 1M 4M 16M 64M" 3
#
# 1. The inputs, each measured on its own:
#    - the link as the planner defines it (per direction, the other direction busy): a 2-rank
#      exchange (`rcomm-bench pt2pt exchange`: both ranks sendrecv at once), 8 B to 64 MiB;
#    - the reduction kernel's rate γ (`rcomm-bench reduce`, one process) and the local copy
#      rate κ (`rcomm-bench reduce --copy`, memcpy), 1 KiB to 64 MiB;
#    - the per-call overhead o of a collective: a 2-rank 8-byte all-gather (`coll allgather -A
#      ring`, not one of the validated operations), which is one 4-byte exchange through the
#      same schedule runner as the validated collectives: o = t(allgather) − α;
#    - the L3 size (sysfs), the threshold of the working-set regime (plan_table.py).
# 2. At each rank count: `rcomm-bench coll allreduce -A ring` (the algorithm the planner prices;
#    in-place times) and with rcomm's own choice, `coll alltoall` (pairwise), one launch per
#    size, f32.
# 3. The whole sweep REPS times over (repetitions interleaved, so a noisy minute hits one
#    repetition, not one size); benches/scripts/plan_table.py takes per-size medians, prices
#    every (operation, ranks, size) with `rcomm-plan --price` on the link's α and its β and γ
#    at the size of the messages the operation's steps send, and prints predicted against
#    measured as Markdown.
#
# Builds release. Raw JSON goes to target/bench-results/plan-<timestamp>/; plan_table.py DIR
# prints the tables again. Ranks beyond the cores are oversubscribed (4 and 8 ranks on 2 cores
# here): the model has no term for that, so only rank counts ≤ cores test it.
set -euo pipefail
cd "$(dirname "$0")/../.."
RANKS=${1:-"2 4 8"}
SIZES=${2:-"8 64K 1M 4M 16M 64M"}
REPS=${3:-3}
cargo build --release -q -p rcomm-launcher -p rcomm-benches --bins
R=$PWD/target/release
OUT=target/bench-results/plan-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
cores=$(nproc)
cat /sys/devices/system/cpu/cpu0/cache/index3/size >"$OUT/l3" 2>/dev/null || true
echo "# $(date -u '+%F %T UTC'), $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg), $cores cores -> $OUT" >&2

bytes() { # 64K -> 65536
    local s=$1
    case $s in
    *K) echo $((${s%K} * 1024)) ;; *M) echo $((${s%M} * 1048576)) ;; *G) echo $((${s%G} * 1073741824)) ;;
    *) echo "$s" ;;
    esac
}
iters() { # OSU-like loop counts per size, "-n N -w W", a tenth when oversubscribed
    local b n w
    b=$(bytes "$1")
    if ((b <= 8192)); then n=2000 w=200; elif ((b <= 131072)); then n=500 w=50;
    elif ((b <= 1048576)); then n=100 w=10; elif ((b <= 4194304)); then n=50 w=5;
    elif ((b <= 16777216)); then n=20 w=3; else n=10 w=2; fi
    if (($2 > cores)); then n=$(((n + 9) / 10)) w=$(((w + 9) / 10)); fi
    echo "-n $n -w $w"
}
run() { timeout 600 "$R/rcomm-run" -n "$1" --no-prefix "${@:2}" 2>>"$OUT/stderr.log"; }

for rep in $(seq 1 "$REPS"); do
    # 1. The link and the reduction: small sizes with OSU's counts, large ones fewer.
    run 2 "$R/rcomm-bench" pt2pt exchange -m 8:8K --json >"$OUT/exchange.$rep.json"
    run 2 "$R/rcomm-bench" pt2pt exchange -m 16K:64M -i 100 -x 10 --json >>"$OUT/exchange.$rep.json"
    "$R/rcomm-bench" reduce -b 1K -e 64M --json >"$OUT/reduce.$rep.json"
    "$R/rcomm-bench" reduce --copy -b 1K -e 64M --json >"$OUT/copy.$rep.json"
    run 2 "$R/rcomm-bench" coll allgather -b 8 -e 8 -n 20000 -w 2000 -A ring --json >"$OUT/overhead.$rep.json"
    # 2. The collectives.
    for n in $RANKS; do
        for s in $SIZES; do
            # shellcheck disable=SC2046
            set -- $(iters "$s" "$n")
            run "$n" "$R/rcomm-bench" coll allreduce -b "$s" -e "$s" "$@" -A ring --json >>"$OUT/allreduce-ring-$n.$rep.json"
            run "$n" "$R/rcomm-bench" coll allreduce -b "$s" -e "$s" "$@" --json >>"$OUT/allreduce-auto-$n.$rep.json"
            # alltoall needs a whole f32 block per rank
            if (($(bytes "$s") % (4 * n) == 0)); then
                run "$n" "$R/rcomm-bench" coll alltoall -b "$s" -e "$s" "$@" --json >>"$OUT/alltoall-$n.$rep.json"
            fi
        done
    done
    echo "# repetition $rep done $(date -u '+%T UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
python3 benches/scripts/plan_table.py "$OUT" --plan "$R/rcomm-plan" --cores "$cores"
