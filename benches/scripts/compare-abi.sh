#!/usr/bin/env bash
# One binary, two libraries: rcomm's C programs (benches/mpi/osu_like.c, halo.c, msg_cost.c)
# compiled ONCE against the MPI-5.0 ABI header (MPICH's mpi_abi.h, from the mpich wheel on PyPI)
# and linked to libmpi_abi.so.1 with no RPATH, then the same file run on MPICH's
# libmpi_abi.so.1 (MPICH's own mpiexec, from the wheel) and on rcomm's (rcomm-run, a
# libmpi_abi.so.1 link to target/release/libmpi_abi.so first on LD_LIBRARY_PATH), interleaved,
# with rcomm's Rust API on the same pattern beside them (rcomm-bench pt2pt, examples/halo and
# examples/msg_cost): the C layer's cost is C-on-rcomm against Rust-on-rcomm.
#
#   benches/scripts/compare-abi.sh [--launches N] [--groups LIST] [-m MIN:MAX] [--rows LIST]
#                                  [-n RANKS] [--window W] [--timeout S]
#
# Groups (default lat,halo,msgcost):
#   lat      osu_like latency (MPI_Send / MPI_Recv ping-pong, OSU 7.2 methodology), sizes
#            -m (default 8:64K), 2 ranks bound to cores; sides: abi-mpich, abi-rcomm and
#            rcomm-rust (`rcomm-bench pt2pt latency`, the same loop on rcomm's Rust API)
#   halo     halo.c (vector / contig / manual exchange of strided columns) at -n ranks
#            (default 2) and --rows (default 64,1024,16384); sides abi-mpich, abi-rcomm and
#            rcomm-rust (benches/examples/halo.rs)
#   msgcost  instructions per 8-byte message under callgrind (msg_cost.c on both libraries,
#            msg_cost.rs on rcomm): deterministic, so one run each; needs valgrind
# Timed groups launch every side N times (default 11), interleaved (the order rotates from round
# to round so that drift hits all sides alike), and print min / median / max per size and side
# and the ratios of the medians: abi-rcomm/rcomm-rust (the C layer's cost) and
# abi-rcomm/abi-mpich (rcomm against MPICH in the same binary).
#
# MPICH comes from PyPI (pip install mpich==5.0.2 into a venv in target/abi-compare, once).
# Raw output, the commands, the machine and its load go to
# target/bench-results/abi-<timestamp>/; the summary is printed and saved as summary.md there.
# Each side's binary is checked to resolve libmpi_abi.so.1 to the library it is meant to
# (ldd under that side's LD_LIBRARY_PATH) before anything is measured.
set -euo pipefail

launches=11
groups=lat,halo,msgcost
range=8:64K
rows=64,1024,16384
nranks=2
window=64
timeout_s=600
MPICH=5.0.2

while [[ $# -gt 0 ]]; do
    case "$1" in
        --launches) launches=$2; shift 2 ;;
        --groups) groups=$2; shift 2 ;;
        -m) range=$2; shift 2 ;;
        --rows) rows=$2; shift 2 ;;
        -n) nranks=$2; shift 2 ;;
        --window) window=$2; shift 2 ;;
        --timeout) timeout_s=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare-abi.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$launches" =~ ^[1-9][0-9]*$ ]] || { echo "compare-abi.sh: --launches needs a positive number" >&2; exit 2; }
IFS=, read -r -a glist <<<"$groups"
for g in "${glist[@]}"; do
    case "$g" in lat|halo|msgcost) ;; *) echo "compare-abi.sh: unknown group '$g'" >&2; exit 2 ;; esac
done

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
tdir=${CARGO_TARGET_DIR:-$root/target}
work=$tdir/abi-compare
mkdir -p "$work"

# ---- MPICH's ABI library, header and launcher (PyPI wheel, once) ----
venv=$work/venv-mpich$MPICH
if [[ ! -x $venv/bin/mpiexec ]]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip -q --disable-pip-version-check install "mpich==$MPICH"
fi
mpich_inc=$venv/include
mpich_lib=$venv/lib
[[ -e $mpich_inc/mpi_abi.h && -e $mpich_lib/libmpi_abi.so.1 ]] || {
    echo "compare-abi.sh: the mpich wheel lacks mpi_abi.h or libmpi_abi.so.1 under $venv" >&2; exit 1; }

# ---- rcomm ----
# Two invocations: a target selection (--bin, --example) would leave the other packages'
# library and binaries unbuilt.
echo "+ cargo build --release -p rcomm-abi -p rcomm-launcher"
cargo build --release -q -p rcomm-abi -p rcomm-launcher
echo "+ cargo build --release -p rcomm-benches --bin rcomm-bench --example halo --example msg_cost"
cargo build --release -q -p rcomm-benches --bin rcomm-bench --example halo --example msg_cost
rel=$tdir/release
rcomm_lib=$work/rcomm-lib
mkdir -p "$rcomm_lib"
ln -sf "$rel/libmpi_abi.so" "$rcomm_lib/libmpi_abi.so.1"

# ---- the binaries: compiled once, against the ABI header, no RPATH ----
bins=$work/bin
mkdir -p "$bins"
abicc() { # out src extra-flags...
    local out=$1 src=$2; shift 2
    echo "+ cc -O2 -DMPI_ABI -I$mpich_inc $* -o $out $src -L$mpich_lib -lmpi_abi"
    cc -O2 -Wall -std=gnu11 -DMPI_ABI -I"$mpich_inc" "$@" -o "$out" "$src" -L"$mpich_lib" -lmpi_abi
    if readelf -d "$out" | grep -Eq 'RPATH|RUNPATH'; then
        echo "compare-abi.sh: $out carries an RPATH; LD_LIBRARY_PATH could not choose the library" >&2; exit 1
    fi
}
abicc "$bins/osu_like" benches/mpi/osu_like.c
abicc "$bins/halo" benches/mpi/halo.c
abicc "$bins/msg_cost" benches/mpi/msg_cost.c -g -fno-ipa-icf
for b in osu_like halo msg_cost; do
    for side in mpich rcomm; do
        d=$mpich_lib; want=$mpich_lib/libmpi_abi.so.1
        [[ $side == rcomm ]] && { d=$rcomm_lib; want=$rcomm_lib/libmpi_abi.so.1; }
        got=$(LD_LIBRARY_PATH=$d ldd "$bins/$b" | awk '/libmpi_abi.so.1/{print $3}')
        [[ $got == "$want" ]] || { echo "compare-abi.sh: $b on $side resolves libmpi_abi.so.1 to '$got', not $want" >&2; exit 1; }
    done
done

# ---- result directory ----
out=$tdir/bench-results/abi-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
{
    echo "date: $(date -u)"
    echo "command: $0 --launches $launches --groups $groups -m $range --rows $rows -n $nranks --window $window"
    echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git status --porcelain 2>/dev/null | wc -l) changed files"
    echo "kernel: $(uname -srm)"
    grep -m1 'model name' /proc/cpuinfo || true
    echo "cpus: $(nproc)"
    echo "mpich: wheel mpich==$MPICH, $(readlink -f "$mpich_lib/libmpi_abi.so.1")"
    echo "rcomm: $(readlink -f "$rcomm_lib/libmpi_abi.so.1")"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/machine.txt"
: >"$out/commands.txt"

side_cmd() { # group side
    local mpich_run="env LD_LIBRARY_PATH=$mpich_lib $mpich_lib/../bin/mpiexec"
    local rcomm_run="env LD_LIBRARY_PATH=$rcomm_lib $rel/rcomm-run"
    case "$1/$2" in
        lat/abi-mpich) echo "$mpich_run -n 2 -bind-to core $bins/osu_like latency -m $range --json" ;;
        lat/abi-rcomm) echo "$rcomm_run -n 2 --bind-to core --no-prefix $bins/osu_like latency -m $range --json" ;;
        lat/rcomm-rust) echo "$rel/rcomm-run -n 2 --bind-to core --no-prefix $rel/rcomm-bench pt2pt latency -m $range --json" ;;
        halo/abi-mpich) echo "$mpich_run -n $nranks $bins/halo --rows $rows --impl abi-mpich" ;;
        halo/abi-rcomm) echo "$rcomm_run -n $nranks --no-prefix $bins/halo --rows $rows --impl abi-rcomm" ;;
        halo/rcomm-rust) echo "$rel/rcomm-run -n $nranks --no-prefix $rel/examples/halo --rows $rows --modes vector,manual,contig" ;;
    esac
}

start=$(date +%s)
sides=(abi-rcomm abi-mpich rcomm-rust)
for ((p = 0; p < launches; p++)); do
    for g in "${glist[@]}"; do
        [[ $g == msgcost ]] && continue
        mkdir -p "$out/$g"
        # Rotate the order: each side goes first, second and third in turn.
        order=("${sides[@]:p%3}" "${sides[@]:0:p%3}")
        for s in "${order[@]}"; do
            c=$(side_cmd "$g" "$s")
            f=$out/$g/$s.$((p + 1))
            echo "$g/$s launch $((p + 1)) load $(cut -d' ' -f1 /proc/loadavg): $c" >>"$out/commands.txt"
            printf '[%4ds] launch %2d/%d %-5s %-10s' $(($(date +%s) - start)) $((p + 1)) "$launches" "$g" "$s"
            set +e
            # shellcheck disable=SC2086
            timeout "$timeout_s" $c >"$f.json" 2>"$f.err"
            rc=$?
            set -e
            echo " rc $rc"
            if [[ $rc != 0 ]]; then
                echo "compare-abi.sh: FAILED (exit $rc): $c" >&2
                tail -20 "$f.err" >&2
                exit 1
            fi
        done
    done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

# ---- msgcost: callgrind, one run per side ----
if [[ ",$groups," == *,msgcost,* ]]; then
    command -v valgrind >/dev/null || { echo "compare-abi.sh: msgcost needs valgrind (apt-get install valgrind)" >&2; exit 1; }
    export MSG_COST_WINDOW=$window
    vg=(valgrind --tool=callgrind --collect-atstart=no
        --toggle-collect='*send_window*' --toggle-collect='*recv_window*'
        --toggle-collect='*post_window*' --toggle-collect='*wait_window*')
    mkdir -p "$out/msgcost"
    per_msg() { # callgrind files...: "send recv isend irecv posted-send post wait" per message
        local msgs=$((20 * window))
        for f in "$@"; do callgrind_annotate --inclusive=yes "$f" 2>/dev/null; done |
            awk -v m="$msgs" '
                / PROGRAM TOTALS/ { next }
                /(msg_cost::|msg_cost\.c:)[a-z_]+_window[ \[]/ {
                    v = $1; gsub(",", "", v)
                    f = $0; sub(/.*(msg_cost::|msg_cost\.c:)/, "", f); sub(/[ \[].*/, "", f)
                    n[f] = v
                }
                END {
                    split("send_window recv_window isend_window irecv_window posted_send_window post_window wait_window", k, " ")
                    for (i = 1; i <= 7; i++) printf " %7.0f", n[k[i]] / m
                    printf "\n"
                }'
    }
    mc=$out/msgcost
    LD_LIBRARY_PATH=$mpich_lib "$mpich_lib/../bin/mpiexec" -n 2 "${vg[@]}" \
        --callgrind-out-file="$mc/abi-mpich.%p" "$bins/msg_cost" >/dev/null 2>"$mc/abi-mpich.log" ||
        { cat "$mc/abi-mpich.log" >&2; exit 1; }
    LD_LIBRARY_PATH=$rcomm_lib "$rel/rcomm-run" -n 2 --no-prefix "${vg[@]}" \
        --callgrind-out-file="$mc/abi-rcomm.%q{RCOMM_RANK}" "$bins/msg_cost" >/dev/null 2>"$mc/abi-rcomm.log" ||
        { cat "$mc/abi-rcomm.log" >&2; exit 1; }
    "$rel/rcomm-run" -n 2 --no-prefix "${vg[@]}" --callgrind-out-file="$mc/rcomm-rust.%q{RCOMM_RANK}" \
        "$rel/examples/msg_cost" >/dev/null 2>"$mc/rcomm-rust.log" || { cat "$mc/rcomm-rust.log" >&2; exit 1; }
    {
        echo "instructions per 8-byte message (callgrind, window $window)"
        printf '%-11s %7s %7s %7s %7s %7s %7s %7s\n' side send recv isend irecv p-send post wait
        for s in abi-mpich abi-rcomm rcomm-rust; do
            printf '%-11s%s\n' "$s" "$(per_msg "$mc/$s".[0-9]*)"
        done
    } >"$mc/table.txt"
fi

python3 - "$out" <<'PY' | tee "$out/summary.md"
import json, os, statistics as st, sys
out = sys.argv[1]
SIDES = ["abi-mpich", "abi-rcomm", "rcomm-rust"]
print(open(os.path.join(out, "machine.txt")).read().strip().replace("\n", "  \n"))
print()

def load(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows

def mmm(v):
    return f"{min(v):.2f} / {st.median(v):.2f} / {max(v):.2f}"

lat = os.path.join(out, "lat")
if os.path.isdir(lat):
    vals = {}
    for f in os.listdir(lat):
        if f.endswith(".json"):
            side = f.split(".")[0]
            for r in load(os.path.join(lat, f)):
                vals.setdefault((side, r["size"]), []).append(r["latency_us"])
    sizes = sorted({k[1] for k in vals})
    n = len(vals.get(("abi-rcomm", sizes[0]), [])) if sizes else 0
    print(f"Latency, µs, min / median / max over {n} launches per side (one osu_like binary on both libraries)")
    print()
    print("| size | abi-mpich | abi-rcomm | rcomm-rust | abi-rcomm / rcomm-rust | abi-rcomm / abi-mpich |")
    print("|---|---|---|---|---|---|")
    for s in sizes:
        cells = [mmm(vals[(x, s)]) if (x, s) in vals else "-" for x in SIDES]
        def ratio(a, b):
            if (a, s) in vals and (b, s) in vals:
                return f"{st.median(vals[(a, s)]) / st.median(vals[(b, s)]):.3f}"
            return "-"
        print(f"| {s} B | " + " | ".join(cells) + f" | {ratio('abi-rcomm', 'rcomm-rust')} | {ratio('abi-rcomm', 'abi-mpich')} |")
    print()

halo = os.path.join(out, "halo")
if os.path.isdir(halo):
    vals = {}
    for f in os.listdir(halo):
        if f.endswith(".json"):
            side = f.split(".")[0]
            for r in load(os.path.join(halo, f)):
                vals.setdefault((side, r["mode"], r["rows"]), []).append(r["us"])
    print("Halo exchange, µs per iteration, min / median / max over the launches (halo.c on both libraries, halo.rs on rcomm)")
    print()
    print("| mode | rows | abi-mpich | abi-rcomm | rcomm-rust | abi-rcomm / rcomm-rust | abi-rcomm / abi-mpich |")
    print("|---|---|---|---|---|---|---|")
    for mode in ("vector", "contig", "manual"):
        for rws in sorted({k[2] for k in vals}):
            cells = [mmm(vals[(x, mode, rws)]) if (x, mode, rws) in vals else "-" for x in SIDES]
            def ratio(a, b):
                ka, kb = (a, mode, rws), (b, mode, rws)
                if ka in vals and kb in vals:
                    return f"{st.median(vals[ka]) / st.median(vals[kb]):.3f}"
                return "-"
            print(f"| {mode} | {rws} | " + " | ".join(cells)
                  + f" | {ratio('abi-rcomm', 'rcomm-rust')} | {ratio('abi-rcomm', 'abi-mpich')} |")
    print()

mc = os.path.join(out, "msgcost", "table.txt")
if os.path.exists(mc):
    print("```")
    print(open(mc).read().rstrip())
    print("```")
PY
echo "saved: $out/summary.md"
