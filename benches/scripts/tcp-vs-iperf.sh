#!/usr/bin/env bash
# tcp-vs-iperf.sh — rcomm's TCP point-to-point bandwidth between two fake hosts against iperf3
# on the same pair, unshaped, at 1 and 4 streams, interleaved (iperf3, rcomm, iperf3, rcomm).
#
#   benches/scripts/tcp-vs-iperf.sh [PAIRS]      (root; builds release)
#
# Fake hosts from tests/cluster.sh (namespaces rcI-host0/1, 10.77.63.0/24, own sshd); rcomm runs
# one rank per host through rcomm-run over ssh: rcomm-bench pt2pt bw -m 4M:4M (window 64, OSU's
# default) with RCOMM_TCP_STREAMS=S; iperf3 -c host0 -l 1M -P S -t 3 from host1. Prints MB/s.
#
# --bind-to none: the fake hosts share this machine's cores, and rcomm-run binds each host's
# first rank to that host's first core — on fake hosts, the same core for both ranks, which
# halves what they can do (iperf3 runs unbound). On real hosts the default binding is right.
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${1:-3}
export RCT_PREFIX=rcI- RCT_SUBNET=10.77.63 RCT_N=2 RCT_STATE=/tmp/rcI-state
[ "$(id -u)" = 0 ] || { echo "tcp-vs-iperf.sh: must run as root" >&2; exit 1; }
command -v iperf3 >/dev/null || apt-get install -y -q iperf3 >/dev/null
cargo build --release -q -p rcomm-launcher -p rcomm-benches
trap 'tests/cluster.sh down' EXIT
tests/cluster.sh up
on() { local h=$1; shift; nsenter --net="/run/netns/rcI-host$h" unshare --uts -- sh -c 'hostname "$0"; exec "$@"' "host$h" "$@"; }
on 0 iperf3 -s -D -1 >/dev/null 2>&1 || true
iperf() { # streams -> MB/s
    on 0 sh -c 'iperf3 -s -1 >/dev/null 2>&1 &'
    sleep 0.3
    on 1 timeout 30 iperf3 -c 10.77.63.1 -l 1M -P "$1" -t 3 -J |
        python3 -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6))'
}
rcomm() { # streams -> MB/s
    on 0 timeout 120 env RCOMM_TCP_STREAMS="$1" "$PWD/target/release/rcomm-run" --ssh "$RCT_STATE/bin/ssh" \
        --bind-to none -H host0:1,host1:1 -x RCOMM_TCP_STREAMS "$PWD/target/release/rcomm-bench" pt2pt bw -m 4M:4M 2>&1 |
        awk '/^\[0\] +4194304/ {print int($3)}'
}
echo "# streams pair iperf3_MBps rcomm_MBps"
for s in 1 4; do
    for p in $(seq "$PAIRS"); do
        echo "$s $p $(iperf "$s") $(rcomm "$s")"
    done
done
