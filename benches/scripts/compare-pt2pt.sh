#!/usr/bin/env bash
# Side-by-side point-to-point comparison of rcomm with Open MPI and/or MPICH on this machine,
# with OSU 7.2's methodology on both sides (rcomm-bench and benches/mpi/osu_like.c).
#
#   benches/scripts/compare-pt2pt.sh [--launches N] [--mpi openmpi|mpich|both] [-m MIN:MAX]
#                                    [--groups LIST] [--show SIZES] [--install]
#
# Launches every side N times (default 11; --pairs N is the old name), interleaved (rcomm, then
# each peer; the order alternates from round to round so that drift hits all sides alike), of
# every group:
#   shm-lat   latency over shared memory             rcomm | Open MPI (ob1+vader, CMA) | MPICH
#   shm-bw    bandwidth over shared memory (-b multiple on both sides; Open MPI also with OSU's
#             default -b single, as a reference column: rcomm cannot run -b single, see
#             rcomm-bench --help)
#   tcp-bw    bandwidth over TCP loopback            RCOMM_TRANSPORT=tcp | --mca btl tcp,self
#   tcp-lat   latency over TCP loopback, sizes up to min(MAX, 64K)
#   nocma-bw  bandwidth over shared memory without single copy
#             RCOMM_SHM_CMA=0 | --mca btl_vader_single_copy_mechanism none
# (tcp-* and nocma-* compare with Open MPI only.) Both sides are bound to cores.
#
# Every launch runs as a user's would: addresses randomised (no `setarch -R`; machine.txt
# records the kernel's randomize_va_space), nothing warmed up between launches. Before each
# launch benches/probes/core_to_core.c measures the one-way latency of a cache line between
# the two CPUs (modes.txt): on a VM the host moves the vCPUs, and every side's small-message
# figures move with it.
#
# Raw JSON lines (and each run's stderr) go to target/bench-results/<timestamp>/, with the
# machine description and the commands; the summary (markdown tables of min / median / max
# per size and side, the ratio rcomm/peer of the medians and rcomm's worst launch against the
# peer's median) is printed and saved as summary.md.
#
# Installs nothing unless --install is given (then apt-get install -y openmpi-bin
# libopenmpi-dev and/or mpich libmpich-dev). Needs python3 for the tables.
set -euo pipefail

pairs=11
mpi=both
range=8:16M
groups=shm-lat,shm-bw,tcp-bw,tcp-lat,nocma-bw
show=
install=0
timeout_s=600

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --launches|--pairs) pairs=$2; shift 2 ;;
        --mpi) mpi=$2; shift 2 ;;
        -m) range=$2; shift 2 ;;
        --groups) groups=$2; shift 2 ;;
        --show) show=$2; shift 2 ;;
        --install) install=1; shift ;;
        --timeout) timeout_s=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "compare-pt2pt.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$pairs" =~ ^[1-9][0-9]*$ ]] || { echo "compare-pt2pt.sh: --launches needs a positive number" >&2; exit 2; }
case "$mpi" in
    openmpi) peers=(openmpi) ;;
    mpich) peers=(mpich) ;;
    both) peers=(openmpi mpich) ;;
    *) echo "compare-pt2pt.sh: --mpi openmpi|mpich|both" >&2; exit 2 ;;
esac

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
        echo "compare-pt2pt.sh: mpicc.$p not found; install $p with --install, or: apt-get install $pk" >&2
        exit 1
    fi
done
command -v python3 >/dev/null || { echo "compare-pt2pt.sh: python3 is needed for the tables" >&2; exit 1; }

# ---- builds ----
bindir=$root/target/osu-like
mkdir -p "$bindir"
for p in "${peers[@]}"; do
    echo "+ mpicc.$p -O2 -o target/osu-like/osu_like.$p benches/mpi/osu_like.c"
    "mpicc.$p" -O2 -Wall -std=c11 -o "$bindir/osu_like.$p" benches/mpi/osu_like.c
done
echo "+ cc -O2 -o target/core_to_core benches/probes/core_to_core.c"
cc -O2 -Wall -o "$root/target/core_to_core" benches/probes/core_to_core.c
echo "+ cargo build --release -p rcomm-benches -p rcomm-launcher"
cargo build --release -p rcomm-benches -p rcomm-launcher
run=$root/target/release/rcomm-run
bench=$root/target/release/rcomm-bench

# ---- result directory ----
ts=$(date -u +%Y%m%dT%H%M%SZ)
out=$root/target/bench-results/$ts
mkdir -p "$out"
{
    echo "date: $(date -u)"
    echo "command: $0 --launches $pairs --mpi $mpi -m $range --groups $groups"
    echo "randomize_va_space: $(cat /proc/sys/kernel/randomize_va_space 2>/dev/null || echo '?') (2: addresses randomised, as users run)"
    echo "transparent_hugepage: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?')"
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
: >"$out/modes.txt"

min=${range%%:*}
max=${range##*:}
[[ "$range" == *:* ]] || min=1
tcp_lat_range=$(python3 - "$min" "$max" <<'EOF'
import sys
def p(s):
    m = {'k': 1 << 10, 'm': 1 << 20, 'g': 1 << 30}
    return int(s[:-1]) * m[s[-1].lower()] if s and s[-1].lower() in m else int(s)
lo, hi = p(sys.argv[1]), min(p(sys.argv[2]), 65536)
print(f"{min(lo, hi)}:{hi}")
EOF
)

# Command of one implementation in one group ("" when that pair does not exist).
cmd_for() { # group impl
    local g=$1 i=$2
    local ompi="mpirun.openmpi --allow-run-as-root -np 2 --bind-to core"
    local mpich="mpiexec.mpich -n 2 -bind-to core"
    local rc="$run -n 2 --bind-to core --no-prefix $bench pt2pt"
    case "$g/$i" in
        shm-lat/rcomm) echo "$rc latency -m $range --json" ;;
        shm-lat/openmpi) echo "$ompi $bindir/osu_like.openmpi latency -m $range --json" ;;
        shm-lat/mpich) echo "$mpich $bindir/osu_like.mpich latency -m $range --json" ;;
        shm-bw/rcomm) echo "$rc bw -b multiple -m $range --json" ;;
        shm-bw/openmpi) echo "$ompi $bindir/osu_like.openmpi bw -b multiple -m $range --json" ;;
        shm-bw/mpich) echo "$mpich $bindir/osu_like.mpich bw -b multiple -m $range --json" ;;
        shm-bw/openmpi-single) echo "$ompi $bindir/osu_like.openmpi bw -b single -m $range --json" ;;
        tcp-bw/rcomm) echo "env RCOMM_TRANSPORT=tcp $rc bw -b multiple -m $range --json" ;;
        tcp-bw/openmpi) echo "$ompi --mca btl tcp,self $bindir/osu_like.openmpi bw -b multiple -m $range --json" ;;
        tcp-lat/rcomm) echo "env RCOMM_TRANSPORT=tcp $rc latency -m $tcp_lat_range --json" ;;
        tcp-lat/openmpi) echo "$ompi --mca btl tcp,self $bindir/osu_like.openmpi latency -m $tcp_lat_range --json" ;;
        nocma-bw/rcomm) echo "env RCOMM_SHM_CMA=0 $rc bw -b multiple -m $range --json" ;;
        nocma-bw/openmpi) echo "$ompi --mca btl_vader_single_copy_mechanism none $bindir/osu_like.openmpi bw -b multiple -m $range --json" ;;
        *) echo "" ;;
    esac
}

impls_for() { # group
    local g=$1 list=(rcomm)
    for p in "${peers[@]}"; do
        case "$g" in
            shm-lat) list+=("$p") ;;
            shm-bw) list+=("$p"); [[ $p == openmpi ]] && list+=(openmpi-single) ;;
            tcp-*|nocma-*) [[ $p == openmpi ]] && list+=(openmpi) ;;
        esac
    done
    echo "${list[@]}"
}

# Checks that a run used the path its group names (rcomm reports it on stderr).
check_path() { # group impl errfile
    local g=$1 i=$2 f=$3
    [[ $i == rcomm ]] || return 0
    case "$g" in
        tcp-*) grep -q 'transport to rank 1: tcp' "$f" || { echo "compare-pt2pt.sh: $g run did not use TCP (see $f)" >&2; return 1; } ;;
        *) grep -q 'transport to rank 1: shm' "$f" || { echo "compare-pt2pt.sh: $g run did not use shared memory (see $f)" >&2; return 1; } ;;
    esac
    if [[ $g == nocma-* ]] && grep -Eq 'single-copy read [1-9]' "$f"; then
        echo "compare-pt2pt.sh: $g run still moved data by single copy (see $f)" >&2
        return 1
    fi
}

IFS=, read -r -a glist <<<"$groups"
for g in "${glist[@]}"; do
    case "$g" in shm-lat|shm-bw|tcp-bw|tcp-lat|nocma-bw) ;; *) echo "compare-pt2pt.sh: unknown group '$g'" >&2; exit 2 ;; esac
    mkdir -p "$out/$g"
done

echo "results: $out"
start=$(date +%s)
for ((p = 1; p <= pairs; p++)); do
    for g in "${glist[@]}"; do
        read -r -a impls <<<"$(impls_for "$g")"
        # Alternate who goes first: rcomm first in odd pairs, last in even ones.
        if ((p % 2 == 0)); then impls=("${impls[@]:1}" rcomm); fi
        for i in "${impls[@]}"; do
            c=$(cmd_for "$g" "$i")
            [[ -n $c ]] || continue
            f=$out/$g/$i.$p
            echo "$g/$i launch $p: $c" >>"$out/commands.txt"
            c2c=$("$root/target/core_to_core" 2>/dev/null || echo '?')
            echo "$g/$i launch $p core-to-core-ns $c2c" >>"$out/modes.txt"
            printf '[%4ds] launch %d/%d %-9s %-15s c2c %4s ns' $(($(date +%s) - start)) "$p" "$pairs" "$g" "$i" "$c2c"
            t0=$(date +%s%N)
            set +e
            # shellcheck disable=SC2086
            timeout "$timeout_s" $c >"$f.json" 2>"$f.err"
            rc=$?
            set -e
            ms=$((($(date +%s%N) - t0) / 1000000))
            printf ' %4d.%01ds\n' $((ms / 1000)) $((ms % 1000 / 100))
            if [[ $rc != 0 ]]; then
                why="exit $rc"; [[ $rc == 124 ]] && why="timed out after ${timeout_s} s"
                echo "compare-pt2pt.sh: FAILED ($why): $c" >&2
                tail -20 "$f.err" >&2
                exit 1
            fi
            check_path "$g" "$i" "$f.err"
        done
    done
done
echo "total: $(($(date +%s) - start)) s"

python3 "$root/benches/scripts/pt2pt_table.py" "$out" ${show:+--show "$show"} | tee "$out/summary.md"
echo "saved: $out/summary.md"
