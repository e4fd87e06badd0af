#!/usr/bin/env bash
# hier-shaped.sh — hierarchical against flat allreduce across 2 fake hosts × 2 ranks whose links
# are rate-limited with tbf (default 1 Gbit/s each way), through rcomm-run over ssh.
#
#   benches/scripts/hier-shaped.sh [RATE] [SIZES]      e.g. 1gbit 16M   (root; builds release)
#
# Makes the fake hosts with tests/cluster.sh (network namespaces rcB-host0/1 on a bridge,
# 10.77.62.0/24, their own sshd), limits each host's egress with tbf, runs rcomm-bench coll
# allreduce with -A ring,rabenseifner,hier and with rcomm's own choice (RCOMM_DEBUG COLL lines
# give the tuner's prediction), and always tears the hosts down. Nothing leaves those namespaces.
set -euo pipefail
cd "$(dirname "$0")/../.."
RATE=${1:-1gbit}
SIZES=${2:-16M}
export RCT_PREFIX=rcB- RCT_SUBNET=10.77.62 RCT_N=2 RCT_STATE=/tmp/rcB-state
[ "$(id -u)" = 0 ] || { echo "hier-shaped.sh: must run as root (network namespaces)" >&2; exit 1; }
cargo build --release -q -p rcomm-launcher -p rcomm-benches
trap 'tests/cluster.sh down' EXIT
tests/cluster.sh up
for i in 0 1; do
    ip netns exec "rcB-host$i" tc qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 50ms
done
run() {
    timeout 600 nsenter --net=/run/netns/rcB-host0 unshare --uts -- sh -c '
        hostname host0
        exec "$@"' sh env RCOMM_DEBUG=INFO RCOMM_DEBUG_SUBSYS=COLL \
        "$PWD/target/release/rcomm-run" --ssh "$RCT_STATE/bin/ssh" -H host0:2,host1:2 \
        -x RCOMM_DEBUG -x RCOMM_DEBUG_SUBSYS \
        "$PWD/target/release/rcomm-bench" coll allreduce -b "$SIZES" -e "$SIZES" -n 5 -w 1 "$@"
}
echo "# 2 fake hosts x 2 ranks, tbf $RATE on each host's link, allreduce f32 sum"
run -A ring,rabenseifner,hier 2>&1 | grep -E '^\[0\] (#  *[0-9]|# algo|  *[0-9])|COLL tuning' || true
echo "# rcomm's choice:"
run 2>&1 | grep -E '^\[0\] (  *[0-9])|\[0\].*COLL allreduce' || true
