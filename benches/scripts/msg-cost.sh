#!/usr/bin/env bash
# msg-cost.sh — instructions per 8-byte message (callgrind), rcomm against Open MPI and MPICH,
# and rcomm at an older revision.
#
#   benches/scripts/msg-cost.sh [--window N] [--rev REV]...
#
# Runs benches/examples/msg_cost.rs (rcomm) and benches/mpi/msg_cost.c (Open MPI, MPICH) under
# `valgrind --tool=callgrind`, counting only the functions that send or receive a window of N
# (default 64) messages; the senders' rings have room for the window and the receivers' messages
# are there when the counted receive work runs, so no count includes waiting. Prints
# instructions per message for blocking send / recv and non-blocking isend / irecv + wait on
# messages that arrived first, and for the window bandwidth test's receive posted before its
# message (the posting, and the waits whose progress takes the messages in). Each --rev REV builds the example at that
# revision in a temporary worktree (target dir target/msg-cost/REV) and measures it too.
# Instruction counts do not move with machine load, so one run each is enough. Needs valgrind,
# mpicc.openmpi and mpicc.mpich (the test setup installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
window=64
revs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --window) window=$2; shift 2 ;;
        --rev) revs+=("$2"); shift 2 ;;
        *) echo "msg-cost.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null || { echo "msg-cost.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
out=$(mktemp -d /tmp/msg-cost.XXXXXX)
[ -z "${MSG_COST_KEEP:-}" ] || echo "callgrind files: $out" >&2
trap '[ -n "${MSG_COST_KEEP:-}" ] || rm -rf "$out"' EXIT
export MSG_COST_WINDOW=$window
vg=(valgrind --tool=callgrind --collect-atstart=no
    --toggle-collect='*send_window*' --toggle-collect='*recv_window*'
    --toggle-collect='*post_window*' --toggle-collect='*wait_window*')

# Prints "send recv isend irecv posted-send post wait" instructions per message from the two
# ranks' callgrind files.
per_msg() {
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
                for (i = 1; i <= 7; i++) printf "%7.0f", n[k[i]] / m
                printf "\n"
            }'
}

rcomm_at() { # $1: label, $2: directory holding target/release/{rcomm-run,examples/msg_cost}
    "$2/rcomm-run" -n 2 --no-prefix "${vg[@]}" --callgrind-out-file="$out/$1.%q{RCOMM_RANK}" \
        "$2/examples/msg_cost" >/dev/null 2>"$out/$1.log" || { cat "$out/$1.log" >&2; exit 1; }
    printf '%-24s %s\n' "rcomm $1" "$(per_msg "$out/$1.0" "$out/$1.1")"
}

cargo build -q --release -p rcomm-launcher -p rcomm-benches --example msg_cost --bins
printf '%-24s %7s %7s %7s %7s %7s %7s %7s\n' "" send recv isend irecv send post wait
printf '%-24s %-31s %s\n' "" "(message already there)" "(receive posted first)"
rcomm_at "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo +)" "$root/target/release"
for rev in "${revs[@]}"; do
    wt=$out/wt-$rev
    git worktree add -q --detach "$wt" "$rev"
    mkdir -p "$wt/benches/examples"
    cp benches/examples/msg_cost.rs "$wt/benches/examples/"
    (cd "$wt" && CARGO_TARGET_DIR=$root/target/msg-cost/$rev cargo build -q --release \
        -p rcomm-launcher -p rcomm-benches --example msg_cost --bins)
    git worktree remove --force "$wt"
    rcomm_at "$rev" "$root/target/msg-cost/$rev/release"
done
mkdir -p target/osu-like
for mpi in openmpi mpich; do
    mpicc.$mpi -O2 -g -fno-ipa-icf -Wall -Wextra -std=c11 -o target/osu-like/msg_cost.$mpi benches/mpi/msg_cost.c
    case $mpi in
        openmpi) launch=(mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 --mca btl self,vader) ;;
        mpich) launch=(mpirun.mpich -n 2) ;;
    esac
    "${launch[@]}" "${vg[@]}" --callgrind-out-file="$out/$mpi.%p" target/osu-like/msg_cost.$mpi \
        >/dev/null 2>"$out/$mpi.log" || { cat "$out/$mpi.log" >&2; exit 1; }
    printf '%-24s %s\n' "$mpi" "$(per_msg "$out"/$mpi.[0-9]*)"
done
echo "(a sender that had to wait for ring room counts its spinning: lower --window if a send figure is far above the others)"
