#!/usr/bin/env bash
# Before/after comparison of two rcomm builds on this machine: interleaved launches of the same
# benchmark (PAIRS launches per side, default 11), order alternating from pair to pair;
# min / median / max per side and the median of the per-pair ratios (after/before) with their
# range. For checking that a change did not slow the hot path, and that it steadied it.
#
#   benches/scripts/ab-compare.sh BEFORE_BIN_DIR AFTER_BIN_DIR [PAIRS]
#
# Each BIN_DIR holds release builds of rcomm-run and rcomm-bench (cargo build --release -p
# rcomm-launcher -p rcomm-benches; a second worktree for the "before" commit). Groups:
#   shm-lat   pt2pt latency 8 B - 4 KiB over shared memory
#   shm-bw    pt2pt bandwidth 64 KiB - 4 MiB over shared memory
#   tcp-lat   pt2pt latency 8 B - 4 KiB with RCOMM_TRANSPORT=tcp
#   allreduce allreduce f32 8 B - 16 MiB (out of place), 2 ranks
#   allreduce-ip  allreduce f32 64 KiB - 16 MiB in place, 2 ranks
#   shm-msgrate   pt2pt window bandwidth 8 B - 64 B (a window of 64 posted receives)
#   allreduce-8   allreduce f32 8 B - 16 MiB, 8 ranks sharing the cores (no binding)
# AB_GROUPS="shm-lat tcp-lat" runs only those.
# Raw JSON lines go to target/bench-results/ab-<timestamp>/; the summary is printed.
set -euo pipefail
before=$1
after=$2
pairs=${3:-11}
out="target/bench-results/ab-$(date -u +%Y%m%dT%H%M%S)"
mkdir -p "$out"
run() { # dir group -> JSON lines on stdout
    local d=$1 g=$2
    case "$g" in
        shm-lat) timeout 300 "$d/rcomm-run" -n 2 --bind-to core --no-prefix "$d/rcomm-bench" pt2pt latency -m 8:4096 --json ;;
        shm-bw) timeout 300 "$d/rcomm-run" -n 2 --bind-to core --no-prefix "$d/rcomm-bench" pt2pt bw -m 65536:4194304 --json ;;
        tcp-lat) RCOMM_TRANSPORT=tcp timeout 300 "$d/rcomm-run" -n 2 --bind-to core --no-prefix "$d/rcomm-bench" pt2pt latency -m 8:4096 --json ;;
        allreduce) timeout 300 "$d/rcomm-run" -n 2 --bind-to core --no-prefix "$d/rcomm-bench" coll allreduce -b 8 -e 16M -f 8 -n 50 --json ;;
        allreduce-ip) timeout 300 "$d/rcomm-run" -n 2 --bind-to core --no-prefix "$d/rcomm-bench" coll allreduce -b 64K -e 16M -f 4 -n 50 --json ;;
        shm-msgrate) timeout 300 "$d/rcomm-run" -n 2 --bind-to core --no-prefix "$d/rcomm-bench" pt2pt bw -m 8:64 --json ;;
        allreduce-8) timeout 300 "$d/rcomm-run" -n 8 --no-prefix "$d/rcomm-bench" coll allreduce -b 8 -e 16M -f 8 -n 50 --json ;;
    esac 2>>"$out/stderr.log" | grep '^{' || true
}
for g in ${AB_GROUPS:-shm-lat shm-bw tcp-lat allreduce}; do
    for ((p = 0; p < pairs; p++)); do
        if ((p % 2 == 0)); then order="before after"; else order="after before"; fi
        for side in $order; do
            d=$before
            [ "$side" = after ] && d=$after
            run "$d" "$g" | sed "s/^{/{\"group\":\"$g\",\"side\":\"$side\",\"pair\":$p,/" >>"$out/results.jsonl"
        done
    done
done
python3 - "$out/results.jsonl" <<'PY' | tee "$out/summary.md"
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
def metric(r):
    if r["group"].endswith("-ip"):
        ip = r.get("inplace") or {}
        return ip.get("time_us"), "time"
    for k in ("latency_us", "time_us"):
        if k in r and r[k] is not None:
            return r[k], "time"
    for k in ("bandwidth_MBps", "bw_MBps"):
        if k in r:
            return r[k], "bw"
    return None, None
groups = {}
for r in rows:
    v, kind = metric(r)
    if v is None:
        continue
    groups.setdefault(r["group"], {}).setdefault(r["size"], {}).setdefault(r["pair"], {})[r["side"]] = (v, kind)
print("| group | size | before: min / median / max | after: min / median / max | after/before: median of pairs (range) | |")
print("|---|---|---|---|---|---|")
for g, sizes in groups.items():
    for size in sorted(sizes):
        pr = sizes[size]
        ratios, b, a, kind = [], [], [], None
        for p, s in pr.items():
            if "before" in s and "after" in s:
                kind = s["after"][1]
                b.append(s["before"][0]); a.append(s["after"][0])
                ratios.append(s["after"][0] / s["before"][0] if s["before"][0] else float("nan"))
        if not ratios:
            continue
        note = "lower is better" if kind == "time" else "higher is better"
        f3 = lambda v: " / ".join(f"{x:.3g}" for x in (min(v), st.median(v), max(v)))
        print(f"| {g} | {size} | {f3(b)} | {f3(a)} | {st.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) | {note}, {len(ratios)} pairs |")
PY
echo "raw: $out"
