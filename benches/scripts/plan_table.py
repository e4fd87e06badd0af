#!/usr/bin/env python3
"""Predicted against measured, from a plan-validate.sh result directory.

    plan_table.py target/bench-results/plan-<timestamp> [--plan target/release/rcomm-plan] [--cores N]

Reads <dir>/pt2pt.json (`rcomm-bench pt2pt latency --json`: one-way µs per size),
<dir>/allreduce-ring-<n>.json, allreduce-auto-<n>.json and alltoall-<n>.json (`rcomm-bench coll
--json` lines). Derives the intra-node link from the ping-pong: α = t(8 B), β = 16 MiB /
(t(16 MiB) − α). Prices every measured (operation, ranks, size) with `rcomm-plan --price` (the
planner's own formulas, not a copy of them) and prints Markdown: predicted µs, measured µs, and
the model error (predicted − measured) / measured. allreduce is measured with the ring forced
(what the planner prices; in-place times), with rcomm's own choice beside it; alltoall with
rcomm's choice (pairwise at these sizes); p2p is the ping-pong's one-way time, the PP transfer.
Rows with more ranks than --cores are marked oversubscribed. Any result with wrong elements is
reported and makes the exit status 1.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

BW_POINT = 16 << 20


def fmt_size(n):
    for unit, v in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= v and n % v == 0:
            return f"{n // v} {unit}"
    return f"{n} B"


def fmt_us(v):
    return f"{v:.2f}" if v < 100 else f"{v:,.0f}".replace(",", " ")


def lines(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def price(plan, op, n, size, alpha_us, beta):
    cmd = [plan, "--price", op, "--ranks", str(n), "--bytes", str(size),
           "--intra-lat", f"{alpha_us * 1000:.3f}ns", "--intra-bw", f"{beta:.0f}B/s", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["time_s"] * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--plan", default="target/release/rcomm-plan")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    a = ap.parse_args()

    p2p = {o["size"]: o["latency_us"] for o in lines(os.path.join(a.dir, "pt2pt.json"))}
    if 8 not in p2p or BW_POINT not in p2p:
        sys.exit(f"{a.dir}/pt2pt.json lacks the 8 B or 16 MiB point")
    alpha = p2p[8]
    beta = BW_POINT / ((p2p[BW_POINT] - alpha) * 1e-6)  # bytes/s
    print(f"Link from the 2-rank ping-pong: α = {alpha:.2f} µs, β = {beta / 1e9:.2f} GB/s "
          f"(16 MiB one-way {fmt_us(p2p[BW_POINT])} µs).\n")

    bad = []
    rows = []  # (op, n, size, predicted, measured, extra)
    ranks = sorted({int(m.group(1)) for f in glob.glob(os.path.join(a.dir, "*-*.json"))
                    if (m := re.search(r"-(\d+)\.json$", f))})
    for n in ranks:
        ring = {o["size"]: o for o in lines(os.path.join(a.dir, f"allreduce-ring-{n}.json"))}
        auto = {o["size"]: o for o in lines(os.path.join(a.dir, f"allreduce-auto-{n}.json"))}
        a2a = {o["size"]: o for o in lines(os.path.join(a.dir, f"alltoall-{n}.json"))}
        for d in (ring, auto, a2a):
            for o in d.values():
                wrong = [o.get("wrong"), (o.get("inplace") or {}).get("wrong")]
                if any(w not in (0, None) for w in wrong):
                    bad.append(o)
        for size in sorted(ring):
            m = ring[size]["inplace"]["time_us"]
            own = auto.get(size, {}).get("inplace", {}).get("time_us")
            rows.append(("allreduce", n, size, price(a.plan, "allreduce", n, size, alpha, beta),
                         m, own))
        for size in sorted(a2a):
            rows.append(("alltoall", n, size, price(a.plan, "alltoall", n, size, alpha, beta),
                         a2a[size]["time_us"], None))
    # PP's transfers at the collectives' sizes, leaving out the two points α and β came from.
    coll_sizes = {size for _, _, size, *_ in rows}
    for size in sorted(p2p):
        if size in coll_sizes and size not in (8, BW_POINT):
            rows.append(("p2p", 2, size, price(a.plan, "p2p", 2, size, alpha, beta), p2p[size],
                         None))

    print("| operation | ranks | size | predicted µs | measured µs | error | rcomm's own algorithm µs |")
    print("|---|---|---|---|---|---|---|")
    for op, n, size, pred, meas, own in rows:
        err = (pred - meas) / meas * 100
        over = " (oversubscribed)" if n > a.cores else ""
        ok = "" if n > a.cores else (" ✓" if abs(err) <= 30 else " ✗")
        print(f"| {op} | {n}{over} | {fmt_size(size)} | {fmt_us(pred)} | {fmt_us(meas)} | "
              f"{err:+.0f} %{ok} | {fmt_us(own) if own is not None else ''} |")
    within = [abs((p - m) / m) <= 0.3 for op, n, s, p, m, _ in rows if n <= a.cores]
    print(f"\nWithin ±30 % where not oversubscribed: {sum(within)} of {len(within)} rows.")
    if bad:
        print(f"WRONG RESULTS: {bad}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
