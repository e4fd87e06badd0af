#!/usr/bin/env bash
# Side-by-side collective comparison of rcomm with Open MPI and/or MPICH on this machine, with
# nccl-tests' methodology on both sides (rcomm-bench coll and the collective modes of
# benches/mpi/osu_like.c: the same loop, data pattern, check pass and JSON).
#
#   benches/scripts/compare-coll.sh [--launches N] [--mpi openmpi|mpich|both] [--ops LIST]
#                                   [--sizes LIST] [--ranks N] [-d TYPE] [-o REDOP] [-A ALGO]
#                                   [--install] [--timeout SECS]
#
# Defaults: 11 launches per side (--pairs N is the old name of --launches), both MPIs, --ops allreduce,bcast, --sizes 8,64K,1M,4M,16M, 2 ranks, float,
# sum, rcomm's automatic algorithm. --ops takes any of allreduce, bcast, barrier, allgather,
# reduce_scatter, alltoall, reduce, gather, scatter (root 0 where there is one); a size is
# nccl-tests' size (the larger buffer: allgather receives, reduce_scatter sends SIZE bytes). OSU's
# collective benchmarks are not packaged in Debian 12, hence osu_like (its collective modes call
# MPI_Allreduce, MPI_Bcast, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall, ...).
#
# Every (operation, size) is its own launch, with a loop count that suits the size (iterations
# ITERS and warm-up WARMUP below, like OSU's small/large classes); within a pair the
# implementations run back to back, rcomm first in odd pairs and last in even ones, so drift
# hits both sides alike. Ranks are bound to cores when they fit (--bind-to core); with more
# ranks than cores (--ranks 8 on 2 cores) nothing is bound, Open MPI gets --oversubscribe, and
# the loop counts are divided by 10 (at least 10 calls and 2 warm-up calls) because every call
# then waits for the scheduler. MPICH 4.0 (ch4) busy-polls without yielding when oversubscribed
# (MPIR_CVAR_POLLS_BEFORE_YIELD changes nothing here): 8 ranks on 2 cores take ~30 ms per small
# call, so such runs take minutes with --mpi both; --mpi openmpi is the quick one.
#
# Raw JSON lines (and each run's stderr) go to target/bench-results/coll-<timestamp>/, with the
# machine description and the commands; the summary (markdown tables of min / median / max
# times per size and side, the ratio rcomm/peer of the medians and the ratio to the better
# peer) is printed and saved as summary.md (benches/scripts/coll_table.py makes it). Launches
# run as a user's would: addresses randomised (no `setarch -R`; machine.txt records
# randomize_va_space).
#
# Installs nothing unless --install is given (then apt-get install -y openmpi-bin
# libopenmpi-dev and/or mpich libmpich-dev). Needs python3 for the tables.
set -euo pipefail

pairs=11
mpi=both
ops=allreduce,bcast
sizes=8,64K,1M,4M,16M
ranks=2
dtype=float
redop=sum
algo=auto
install=0
timeout_s=300

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --launches|--pairs) pairs=$2; shift 2 ;;
        --mpi) mpi=$2; shift 2 ;;
        --ops) ops=$2; shift 2 ;;
        --sizes) sizes=$2; shift 2 ;;
        --ranks) ranks=$2; shift 2 ;;
        -d) dtype=$2; shift 2 ;;
        -o) redop=$2; shift 2 ;;
        -A) algo=$2; shift 2 ;;
        --install) install=1; shift ;;
        --timeout) timeout_s=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "compare-coll.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$pairs" =~ ^[1-9][0-9]*$ ]] || { echo "compare-coll.sh: --launches needs a positive number" >&2; exit 2; }
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "compare-coll.sh: --ranks needs a positive number" >&2; exit 2; }
case "$mpi" in
    openmpi) peers=(openmpi) ;;
    mpich) peers=(mpich) ;;
    both) peers=(openmpi mpich) ;;
    *) echo "compare-coll.sh: --mpi openmpi|mpich|both" >&2; exit 2 ;;
esac
IFS=, read -r -a oplist <<<"$ops"
for op in "${oplist[@]}"; do
    case "$op" in
        allreduce|bcast|barrier|allgather|reduce_scatter|alltoall|reduce|gather|scatter) ;;
        *) echo "compare-coll.sh: --ops: osu_like has allreduce, bcast, barrier, allgather, reduce_scatter, alltoall, reduce, gather, scatter (not '$op')" >&2; exit 2 ;;
    esac
done
case "$dtype" in float|double|int32|int64) ;; *) echo "compare-coll.sh: -d: osu_like has float, double, int32, int64" >&2; exit 2 ;; esac
case "$redop" in sum|prod|min|max) ;; *) echo "compare-coll.sh: -o: osu_like has sum, prod, min, max" >&2; exit 2 ;; esac
IFS=, read -r -a sizelist <<<"$sizes"

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

# ---- MPI installations ----
pkgs_openmpi="openmpi-bin libopenmpi-dev"
pkgs_mpich="mpich libmpich-dev"
if [[ $install == 1 ]]; then
    want=""
    for p in "${peers[@]}"; do
        if [[ $p == openmpi ]]; then want+=" $pkgs_openmpi"; else want+=" $pkgs_mpich"; fi
    done
    echo "+ apt-get install -y$want"
    # shellcheck disable=SC2086
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y $want; then
        echo "+ apt-get update (install failed; package lists may be stale)"
        apt-get update
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y $want
    fi
fi
for p in "${peers[@]}"; do
    if ! command -v "mpicc.$p" >/dev/null; then
        pk=$pkgs_openmpi; [[ $p == mpich ]] && pk=$pkgs_mpich
        echo "compare-coll.sh: mpicc.$p not found; install $p with --install, or: apt-get install $pk" >&2
        exit 1
    fi
done
command -v python3 >/dev/null || { echo "compare-coll.sh: python3 is needed for the tables" >&2; exit 1; }

# ---- builds ----
bindir=$root/target/osu-like
mkdir -p "$bindir"
for p in "${peers[@]}"; do
    echo "+ mpicc.$p -O2 -Wall -Wextra -std=c11 -o target/osu-like/osu_like.$p benches/mpi/osu_like.c"
    "mpicc.$p" -O2 -Wall -Wextra -std=c11 -o "$bindir/osu_like.$p" benches/mpi/osu_like.c
done
echo "+ cargo build --release -p rcomm-benches -p rcomm-launcher"
cargo build --release -p rcomm-benches -p rcomm-launcher
run=$root/target/release/rcomm-run
bench=$root/target/release/rcomm-bench

# ---- result directory ----
ts=$(date -u +%Y%m%dT%H%M%SZ)
out=$root/target/bench-results/coll-$ts
mkdir -p "$out"
{
    echo "date: $(date -u)"
    echo "randomize_va_space: $(cat /proc/sys/kernel/randomize_va_space 2>/dev/null || echo '?')"
    echo "command: $0 --launches $pairs --mpi $mpi --ops $ops --sizes $sizes --ranks $ranks -d $dtype -o $redop -A $algo"
    echo "git: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?') $(git -C "$root" status --porcelain 2>/dev/null | wc -l) changed files"
    echo "kernel: $(uname -srm)"
    grep -m1 'model name' /proc/cpuinfo || true
    echo "cpus: $(nproc)  memory: $(free -g | awk '/Mem:/{print $2}') GiB"
    lscpu | grep -E 'L1d|L2|L3|NUMA node\(s\)|Hypervisor' || true
    echo "rustc: $(rustc --version)"
    command -v mpirun.openmpi >/dev/null && echo "openmpi: $(mpirun.openmpi --version 2>/dev/null | head -1)"
    command -v mpiexec.mpich >/dev/null && echo "mpich: $(mpiexec.mpich --version 2>/dev/null | awk '/Version:/{print $2; exit}')"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/machine.txt"
: >"$out/commands.txt"

# Bytes of a size with an optional K/M/G suffix.
bytes_of() {
    local s=$1 m=1
    case "$s" in
        *[kK]) m=1024; s=${s%?} ;;
        *[mM]) m=$((1 << 20)); s=${s%?} ;;
        *[gG]) m=$((1 << 30)); s=${s%?} ;;
    esac
    [[ "$s" =~ ^[0-9]+$ ]] || { echo "compare-coll.sh: bad size '$1'" >&2; exit 2; }
    echo $((s * m))
}

if ((ranks <= $(nproc))); then
    oversub=0
    bind_rc="--bind-to core"; bind_ompi="--bind-to core"; bind_mpich="-bind-to core"
else
    oversub=1
    bind_rc="--bind-to none"; bind_ompi="--oversubscribe --bind-to none"; bind_mpich="-bind-to none"
fi
echo "ranks: $ranks on $(nproc) cpus$( ((oversub)) && echo ' (oversubscribed: not bound, loop counts / 10)')" >>"$out/machine.txt"

# Timed calls and warm-up calls for a size (OSU-like classes; a launch stays well under 1 s).
loops_for() { # bytes
    local b=$1 n w
    if ((b <= 8192)); then n=10000 w=1000
    elif ((b <= 131072)); then n=2000 w=200
    elif ((b <= 1048576)); then n=300 w=30
    elif ((b <= 4194304)); then n=100 w=10
    else n=30 w=5; fi
    if ((oversub)); then
        n=$((n / 10 < 10 ? 10 : n / 10)); w=$((w / 10 < 2 ? 2 : w / 10))
    fi
    echo "$n $w"
}

cmd_for() { # impl op bytes
    local i=$1 op=$2 b=$3 n w
    read -r n w <<<"$(loops_for "$b")"
    local flags="-b $b -e $b -n $n -w $w -c 1 -d $dtype -o $redop --json"
    case "$i" in
        rcomm) echo "$run -n $ranks $bind_rc --no-prefix $bench coll $op $flags -A $algo" ;;
        openmpi) echo "mpirun.openmpi --allow-run-as-root -np $ranks $bind_ompi $bindir/osu_like.openmpi $op $flags" ;;
        mpich) echo "mpiexec.mpich -n $ranks $bind_mpich $bindir/osu_like.mpich $op $flags" ;;
    esac
}

# rcomm must have used shared memory between its ranks (it prints each rank's transport).
check_path() { # impl errfile
    [[ $1 == rcomm && $ranks -gt 1 ]] || return 0
    grep -q 'Rank  1 .*transport shm' "$2" || { echo "compare-coll.sh: rcomm did not use shared memory (see $2)" >&2; return 1; }
}

for op in "${oplist[@]}"; do mkdir -p "$out/$op"; done
echo "results: $out"
start=$(date +%s)
for ((p = 1; p <= pairs; p++)); do
    for op in "${oplist[@]}"; do
        for s in "${sizelist[@]}"; do
            b=$(bytes_of "$s")
            impls=(rcomm "${peers[@]}")
            if ((p % 2 == 0)); then impls=("${peers[@]}" rcomm); fi
            for i in "${impls[@]}"; do
                c=$(cmd_for "$i" "$op" "$b")
                f=$out/$op/$i.$b.$p
                echo "$op/$i size $b launch $p: $c" >>"$out/commands.txt"
                printf '[%4ds] launch %d/%d %-14s %9s %-8s' $(($(date +%s) - start)) "$p" "$pairs" "$op" "$b" "$i"
                t0=$(date +%s%N)
                set +e
                # shellcheck disable=SC2086
                timeout "$timeout_s" $c >"$f.json" 2>"$f.err"
                rc=$?
                set -e
                ms=$((($(date +%s%N) - t0) / 1000000))
                printf ' %3d.%01ds\n' $((ms / 1000)) $((ms % 1000 / 100))
                if [[ $rc != 0 ]]; then
                    why="exit $rc"; [[ $rc == 124 ]] && why="timed out after ${timeout_s} s"
                    echo "compare-coll.sh: FAILED ($why): $c" >&2
                    tail -20 "$f.err" >&2
                    exit 1
                fi
                check_path "$i" "$f.err"
            done
        done
    done
done
echo "total: $(($(date +%s) - start)) s"

python3 "$root/benches/scripts/coll_table.py" "$out" | tee "$out/summary.md"
echo "saved: $out/summary.md"
