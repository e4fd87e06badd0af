#!/usr/bin/env bash
# check-overhead.sh — the cost of checked collectives (RCOMM_CHECK=1): interleaved pairs of
# `rcomm-bench coll allreduce` runs without and with RCOMM_CHECK=1 on 2 ranks, per case; prints
# the median (and minimum) time per call over the pairs, out of place and in place, and the
# overhead of checked mode.
#
#   benches/scripts/check-overhead.sh [PAIRS] [BIN]     default 20 pairs, target/release
#
# VAR=RCOMM_STRAGGLER benches/scripts/check-overhead.sh measures that flag instead.
#
# Cases: 64 KiB and 8 B through the shared-memory algorithm (rcomm's choice on one node),
# 64 KiB and 8 B through messages (-A rd: recursive doubling over the shared-memory transport),
# 64 KiB through messages over TCP (RCOMM_TRANSPORT=tcp -A rd).
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${1:-20}
VAR=${VAR:-RCOMM_CHECK}
BIN=${2:-target/release}
if [ "$BIN" = target/release ]; then
    cargo build --release -q -p rcomm-launcher -p rcomm-benches
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() { # label env -- args
    local label=$1; shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    for _ in $(seq "$PAIRS"); do
        for c in 0 1; do
            line=$(env "${envs[@]}" "$VAR=$c" "$BIN/rcomm-run" -n 2 --bind-to core "$BIN/rcomm-bench" \
                coll allreduce "$@" 2>/dev/null | grep -E '^\[0\] +[0-9]+ ' | tail -1)
            echo "$label $c $line" >>"$out"
        done
    done
}
run shm-64K RCOMM_TRANSPORT=auto -- -b 64K -e 64K -n 1000 -w 100
run shm-8B RCOMM_TRANSPORT=auto -- -b 8 -e 8 -n 5000 -w 500
run msg-64K RCOMM_TRANSPORT=auto -- -b 64K -e 64K -n 1000 -w 100 -A rd
run msg-8B RCOMM_TRANSPORT=auto -- -b 8 -e 8 -n 5000 -w 500 -A rd
run tcp-64K RCOMM_TRANSPORT=tcp -- -b 64K -e 64K -n 500 -w 50 -A rd
python3 - "$out" "$VAR" <<'PY'
import collections, statistics as st, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 15:
        continue
    d[(f[0], f[1], "out of place")].append(float(f[8]))
    d[(f[0], f[1], "in place")].append(float(f[12]))
print(f"{sys.argv[2]} off/on")
print(f"{'case':8} {'variant':13} {'off µs':>9} {'on µs':>9} {'overhead':>9}   {'min off':>8} {'min on':>8}")
for label in dict.fromkeys(k[0] for k in d):
    for v in ("out of place", "in place"):
        a, b = d[(label, "0", v)], d[(label, "1", v)]
        if a and b:
            ma, mb = st.median(a), st.median(b)
            print(f"{label:8} {v:13} {ma:9.2f} {mb:9.2f} {(mb / ma - 1) * 100:+8.1f} %   {min(a):8.2f} {min(b):8.2f}")
PY
