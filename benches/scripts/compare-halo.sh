#!/usr/bin/env bash
# Strided-column halo exchange (vector datatype) against the same columns packed by hand
# (manual) and a contiguous exchange of the same bytes (contig), rcomm side by side with Open MPI (and MPICH with --mpich): benches/examples/halo.rs and
# its C twin benches/mpi/halo.c, N interleaved launches per side (default 11; the order
# alternates), min / median / max;
# then rcomm's floor for the layout: the contiguous exchange plus the strided copies alone (touch).
#
#   benches/scripts/compare-halo.sh [--launches N] [-n RANKS] [--rows LIST] [--mpich]
#   (--pairs N is the old name of --launches)
#
# Needs mpicc.openmpi (apt-get install openmpi-bin libopenmpi-dev) and python3. Raw JSON lines
# go to target/bench-results/halo-<timestamp>/; the summary table is printed and saved there.
set -euo pipefail
pairs=11; n=4; rows=64,1024,16384; mpich=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --launches|--pairs) pairs=$2; shift 2 ;;
        -n) n=$2; shift 2 ;;
        --rows) rows=$2; shift 2 ;;
        --mpich) mpich=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare-halo.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/../.."
root=$PWD
cargo build --release -q -p rcomm-benches --example halo -p rcomm-launcher --bin rcomm-run
mkdir -p target/halo
mpicc.openmpi -O2 -Wall -o target/halo/halo.openmpi benches/mpi/halo.c
peers=(openmpi)
if ((mpich)); then mpicc.mpich -O2 -Wall -o target/halo/halo.mpich benches/mpi/halo.c; peers+=(mpich); fi
out=$root/target/bench-results/halo-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
cmd() {
    case "$1" in
        rcomm) echo "target/release/rcomm-run -n $n --no-prefix target/release/examples/halo --rows $rows --modes vector,manual,contig,touch" ;;
        openmpi) echo "mpirun.openmpi --allow-run-as-root --oversubscribe -np $n target/halo/halo.openmpi --rows $rows --impl openmpi" ;;
        mpich) echo "mpiexec.mpich -n $n target/halo/halo.mpich --rows $rows --impl mpich" ;;
    esac
}
{ echo "# $(date -u) $(nproc) CPUs, $n ranks, $pairs pairs"; for s in rcomm "${peers[@]}"; do echo "# $(cmd "$s")"; done; } > "$out/commands.txt"
for ((p = 0; p < pairs; p++)); do
    order=(rcomm "${peers[@]}")
    ((p % 2)) && order=("${peers[@]}" rcomm)
    for s in "${order[@]}"; do
        $(cmd "$s") >> "$out/results.jsonl" 2>> "$out/stderr.txt"
    done
done
python3 - "$out/results.jsonl" <<'PY' | tee "$out/summary.md"
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
impls = sorted({r["impl"] for r in rows}, key=lambda s: s != "rcomm")
def med(i, m, n):
    v = sorted(r["us"] for r in rows if (r["impl"], r["mode"], r["rows"]) == (i, m, n))
    return st.median(v), v[0], v[-1]
print("| rows (bytes) | " + " | ".join(f"{i} vector µs | {i} manual µs | {i} contig µs | {i} vector/manual | {i} vector/contig" for i in impls)
      + " | rcomm/" + " | rcomm/".join(i for i in impls[1:]) + " (vector) |")
print("|---" * (1 + 5 * len(impls) + len(impls) - 1) + "|")
for n in sorted({r["rows"] for r in rows}):
    cells = []
    for i in impls:
        v, h, c = med(i, "vector", n), med(i, "manual", n), med(i, "contig", n)
        f = lambda x: f"{x[1]:.1f} / {x[0]:.1f} / {x[2]:.1f}"
        cells += [f(v), f(h), f(c), f"{v[0] / h[0]:.2f}", f"{v[0] / c[0]:.2f}"]
    ratios = [f"{med('rcomm', 'vector', n)[0] / med(i, 'vector', n)[0]:.2f}" for i in impls[1:]]
    print(f"| {n} ({n * 8} B) | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
if any(r["mode"] == "touch" for r in rows):
    # The floor: the exchange of contiguous bytes plus the layout's own strided reads and
    # writes (touch: manual's copies without messages), which no implementation avoids.
    print()
    print("| rows (bytes) | rcomm contig µs | rcomm touch µs | floor (contig + touch) / contig | rcomm vector/contig | rcomm vector / (contig + touch) |")
    print("|---|---|---|---|---|---|")
    for n in sorted({r["rows"] for r in rows}):
        c, t, v = (med("rcomm", m, n)[0] for m in ("contig", "touch", "vector"))
        print(f"| {n} ({n * 8} B) | {c:.1f} | {t:.1f} | {(c + t) / c:.2f} | {v / c:.2f} | {v / (c + t):.2f} |")
PY
echo "results: $out"
