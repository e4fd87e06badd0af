#!/usr/bin/env bash
# fakehosts-coll.sh — a small allreduce across 3 fake hosts (network namespaces on this machine,
# one kernel) against the same ranks on one host over TCP, runs interleaved.
#
#   benches/scripts/fakehosts-coll.sh [RUNS] [SIZE] [PER_HOST]   e.g. 7 8 1   (root)
#
# Makes the hosts with tests/cluster.sh (namespaces rcF-host0..2 on a bridge, 10.77.63.0/24,
# their own sshd), runs `rcomm-bench coll allreduce` RUNS times over ssh with PER_HOST ranks on
# each host, and as often `RCOMM_TRANSPORT=tcp rcomm-run -n 3*PER_HOST` on this host, alternating,
# then prints each run's time per call (µs, out of place) and the median, best and ratio. The
# issue's figure compares the fake hosts' median with the best one-host TCP run (that one is
# noisy). With FH_ALGO set (e.g. allreduce:rd), both sides run that algorithm (RCOMM_ALGO):
# on one host the tuner otherwise picks the shared-memory windows, which no TCP message
# touches. Always tears the hosts down; nothing leaves the namespaces. Needs release binaries
# (`cargo build --release -p rcomm-launcher -p rcomm-benches --bins`).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-7}
SIZE=${2:-8}
PER=${3:-1}
export RCT_PREFIX=rcF- RCT_SUBNET=10.77.63 RCT_N=3 RCT_STATE=/tmp/rcF-state
[ "$(id -u)" = 0 ] || { echo "fakehosts-coll.sh: must run as root (network namespaces)" >&2; exit 1; }
bin=$PWD/target/release
[ -x "$bin/rcomm-run" ] && [ -x "$bin/rcomm-bench" ] || {
    echo "fakehosts-coll.sh: build first: cargo build --release -p rcomm-launcher -p rcomm-benches --bins" >&2
    exit 1
}
trap 'tests/cluster.sh down' EXIT
tests/cluster.sh up >/dev/null
n=$((3 * PER))
iters=2000
flags=(coll allreduce -b "$SIZE" -e "$SIZE" -n "$iters" -w 200 -c 1 -d float)
# The time column (out of place) of the bench's one result line.
col() { awk '!/^#/ && NF >= 6 { t = $6 } END { print t }'; }
algo=()
if [ -n "${FH_ALGO:-}" ]; then algo=(env "RCOMM_ALGO=$FH_ALGO"); fi
hosts() {
    timeout 120 "${algo[@]}" nsenter --net=/run/netns/rcF-host0 unshare --uts -- sh -c '
        hostname host0
        exec "$@"' sh "$bin/rcomm-run" --ssh "$RCT_STATE/bin/ssh" \
        -H "host0:$PER,host1:$PER,host2:$PER" ${FH_ALGO:+-x RCOMM_ALGO} --no-prefix "$bin/rcomm-bench" "${flags[@]}" | col
}
local_tcp() {
    RCOMM_TRANSPORT=tcp timeout 120 "${algo[@]}" "$bin/rcomm-run" -n "$n" --no-prefix "$bin/rcomm-bench" "${flags[@]}" | col
}
fh=() lt=()
for r in $(seq 1 "$RUNS"); do
    if (( r % 2 )); then fh+=("$(hosts)"); lt+=("$(local_tcp)"); else lt+=("$(local_tcp)"); fh+=("$(hosts)"); fi
    echo "run $r: fake hosts ${fh[-1]} µs, one host over TCP ${lt[-1]} µs" >&2
done
python3 - "$SIZE" "$PER" "${fh[*]}" "${lt[*]}" <<'EOF'
import statistics, sys
size, per, fh, lt = sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3].split()], [float(x) for x in sys.argv[4].split()]
import os
print(f"algorithm: {os.environ.get('FH_ALGO') or 'the tuner' + chr(39) + 's choice'}")
print(f"allreduce {size} B f32, 3 fake hosts x {per} rank(s) vs {3*int(per)} ranks on one host over TCP, {len(fh)} interleaved runs, µs per call")
print(f"fake hosts: median {statistics.median(fh):.1f} (min {min(fh):.1f}, max {max(fh):.1f})")
print(f"one host, TCP: median {statistics.median(lt):.1f} (best {min(lt):.1f}, max {max(lt):.1f})")
print(f"fake-host median / best one-host TCP: {statistics.median(fh)/min(lt):.1f}x; median / median: {statistics.median(fh)/statistics.median(lt):.1f}x")
EOF
