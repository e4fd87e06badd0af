#!/usr/bin/env python3
"""Predicted against measured, from a plan-validate.sh result directory.

    plan_table.py target/bench-results/plan-<timestamp> [--plan target/release/rcomm-plan] [--cores N]

Reads <dir>/pt2pt.<rep>.json (`rcomm-bench pt2pt latency --json`: one-way µs per size) and
<dir>/allreduce-ring-<n>.<rep>.json, allreduce-auto-<n>.<rep>.json, alltoall-<n>.<rep>.json
(`rcomm-bench coll --json` lines), one file per repetition; every time below is the median over
repetitions (with min–max when there are several). The intra-node link comes from the
ping-pong: α = t(8 B), β = the median over 1–64 MiB of S / (t(S) − α). Every measured
(operation, ranks, size) is priced with `rcomm-plan --price` (the planner's own formulas, not
a copy) and printed as Markdown: predicted µs, measured µs, model error (predicted − measured)
/ measured. allreduce is measured with the ring forced (what the planner prices; in-place
times), rcomm's own choice beside it; alltoall with rcomm's choice (pairwise); p2p is the
ping-pong's one-way time, PP's transfer (1–64 MiB rows are among the points β came from).
Rows with more ranks than --cores are marked oversubscribed and left out of the ±30 % count.
Any result with wrong elements is reported and makes the exit status 1.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys

FIT = [1 << k for k in range(20, 27)]  # 1 MiB … 64 MiB


def fmt_size(n):
    for unit, v in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= v and n % v == 0:
            return f"{n // v} {unit}"
    return f"{n} B"


def fmt_us(v):
    return f"{v:.2f}" if v < 100 else f"{v:,.0f}".replace(",", " ")


def fmt_meas(vals):
    med = statistics.median(vals)
    if len(vals) == 1:
        return fmt_us(med)
    return f"{fmt_us(med)} ({fmt_us(min(vals))}–{fmt_us(max(vals))})"


def lines(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def gather(d, stem, pick):
    """{size: [value per repetition]} from <d>/<stem>.<rep>.json."""
    out = {}
    for path in sorted(glob.glob(os.path.join(d, f"{stem}.*.json"))):
        for o in lines(path):
            v = pick(o)
            if v is not None:
                out.setdefault(o["size"], []).append(v)
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

    p2p = gather(a.dir, "pt2pt", lambda o: o["latency_us"])
    if 8 not in p2p or not all(s in p2p for s in FIT):
        sys.exit(f"{a.dir}/pt2pt.*.json lack the 8 B or 1–64 MiB points")
    med = {s: statistics.median(v) for s, v in p2p.items()}
    alpha = med[8]
    beta = statistics.median(s / ((med[s] - alpha) * 1e-6) for s in FIT)  # bytes/s
    reps = len(p2p[8])
    print(f"Link from the 2-rank ping-pong ({reps} repetitions): α = {alpha:.2f} µs, "
          f"β = {beta / 1e9:.2f} GB/s (per size, S/(t − α): "
          + ", ".join(f"{fmt_size(s)} {s / ((med[s] - alpha) * 1e3):.2f}" for s in FIT)
          + " GB/s).\n")

    bad = []

    def check(o):
        for w in (o.get("wrong"), (o.get("inplace") or {}).get("wrong")):
            if w not in (0, None):
                bad.append(o)
        return o

    rows = []  # (op, n, size, predicted, [measured], [own algorithm])
    ranks = sorted({int(m.group(1)) for f in glob.glob(os.path.join(a.dir, "*.json"))
                    if (m := re.search(r"-(\d+)\.\d+\.json$", f))})
    for n in ranks:
        ring = gather(a.dir, f"allreduce-ring-{n}", lambda o: check(o)["inplace"]["time_us"])
        auto = gather(a.dir, f"allreduce-auto-{n}", lambda o: check(o)["inplace"]["time_us"])
        a2a = gather(a.dir, f"alltoall-{n}", lambda o: check(o)["time_us"])
        for size in sorted(ring):
            rows.append(("allreduce", n, size, price(a.plan, "allreduce", n, size, alpha, beta),
                         ring[size], auto.get(size)))
        for size in sorted(a2a):
            rows.append(("alltoall", n, size, price(a.plan, "alltoall", n, size, alpha, beta),
                         a2a[size], None))
    # PP's transfers at the collectives' sizes, except the 8 B point α is.
    coll_sizes = {r[2] for r in rows}
    for size in sorted(p2p):
        if size in coll_sizes and size != 8:
            rows.append(("p2p", 2, size, price(a.plan, "p2p", 2, size, alpha, beta), p2p[size],
                         None))

    print("| operation | ranks | size | predicted µs | measured µs, median (min–max) | error | "
          "rcomm's own algorithm µs |")
    print("|---|---|---|---|---|---|---|")
    within = []
    for op, n, size, pred, meas, own in rows:
        m = statistics.median(meas)
        err = (pred - m) / m * 100
        over = n > a.cores
        if not over:
            within.append(abs(err) <= 30)
        mark = "" if over else (" ✓" if abs(err) <= 30 else " ✗")
        print(f"| {op} | {n}{' (oversubscribed)' if over else ''} | {fmt_size(size)} | "
              f"{fmt_us(pred)} | {fmt_meas(meas)} | {err:+.0f} %{mark} | "
              f"{fmt_us(statistics.median(own)) if own else ''} |")
    print(f"\nWithin ±30 % where not oversubscribed: {sum(within)} of {len(within)} rows.")
    if bad:
        print(f"WRONG RESULTS: {bad}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
