#!/usr/bin/env python3
"""Predicted against measured, from a plan-validate.sh result directory.

    plan_table.py target/bench-results/plan-<timestamp> [--plan target/release/rcomm-plan] [--cores N]

Inputs, one file per repetition, every time the median over repetitions (min–max shown):
- <dir>/exchange.<rep>.json (`rcomm-bench pt2pt exchange --json`: both ranks sendrecv S bytes
  with each other at once, µs per exchange): the link as the planner defines it — per
  direction, while the other direction is busy, as in every ring or pairwise step. α = t(8 B);
  β(m) = m / (t(m) − α), t interpolated log-log between the measured sizes: the link's
  bandwidth curve (eager, pipelined, single-copy; in cache and from memory), as an OSU or
  nccl-tests curve describes a link.
- <dir>/reduce.<rep>.json (`rcomm-bench reduce --json`): γ(m), bytes folded per second by the
  reduction kernel at operand size m.
- <dir>/copy.<rep>.json (`rcomm-bench reduce --copy --json`): κ(m), bytes memcpy'd per second.
- <dir>/overhead.<rep>.json (`rcomm-bench coll allgather -A ring`, 2 ranks, 8 B): one 4-byte
  exchange through the collectives' schedule runner; o = t − α is the per-call overhead.
- <dir>/l3: the L3 size (sysfs, e.g. `32768K`; the machine's own when the file is missing).
- <dir>/allreduce-ring-<n>, allreduce-auto-<n>, alltoall-<n> (`rcomm-bench coll --json`).

Every (operation, ranks, size) is priced with `rcomm-plan --price` (the planner's own code, not
a copy) with --call-overhead o, on the link at the size of the messages its steps send: m = S/n
for the ring all-reduce (chunks; γ(S/n) for the folds) and for the pairwise all-to-all (blocks;
κ(S/n) for the block it keeps). The regime (cache or memory) follows the operation's working
set W, all ranks' buffers together (the L3 is shared): the ring all-reduce in place holds S of
data and S/n of scratch per rank, W = (n+1)·S; the all-to-all a send and a receive buffer of S,
W = 2n·S. When W exceeds the L3, each curve is read at the size whose own benchmark has the
same working set, if that is larger than m (the exchange holds 4m over its two ranks, the copy
and the reduction 2m), so an out-of-cache collective is priced with out-of-cache rates and
the message size still picks the protocol. Printed as Markdown:
predicted µs, measured µs, model error (predicted − measured) / measured. allreduce is
measured with the ring forced (what the planner prices; in-place times), rcomm's own choice
beside it; alltoall with rcomm's choice (pairwise). PP's transfers are exchanges themselves
(in the 1F1B steady state activations go forward while gradients come back): the link input,
listed as such and not counted. Rows with more ranks than --cores are marked oversubscribed
and left out of the ±30 % count. Any result with wrong elements makes the exit status 1.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys

import math


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


def price(plan, op, n, size, alpha_us, beta, gamma=None, kappa=None, overhead_us=None):
    cmd = [plan, "--price", op, "--ranks", str(n), "--bytes", str(size),
           "--intra-lat", f"{alpha_us * 1000:.3f}ns", "--intra-bw", f"{beta:.0f}B/s", "--json"]
    if gamma:
        cmd += ["--reduce-bw", f"{gamma:.0f}B/s"]
    if kappa:
        cmd += ["--copy-bw", f"{kappa:.0f}B/s"]
    if overhead_us:
        cmd += ["--call-overhead", f"{overhead_us * 1000:.3f}ns"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["time_s"] * 1e6


def loglog(points, x):
    """Value at x of the curve through points {x: y}, linear in log x / log y, clamped."""
    xs = sorted(points)
    if x <= xs[0]:
        return points[xs[0]] * (x / xs[0]) if x > 0 else 0.0
    if x >= xs[-1]:
        return points[xs[-1]] * (x / xs[-1])
    for lo, hi in zip(xs, xs[1:]):
        if lo <= x <= hi:
            f = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return math.exp(math.log(points[lo]) + f * (math.log(points[hi]) - math.log(points[lo])))
    raise AssertionError("unreachable")


def l3_bytes(d):
    """The L3 size in bytes from <d>/l3 or sysfs (`32768K`), None when unknown."""
    for path in (os.path.join(d, "l3"), "/sys/devices/system/cpu/cpu0/cache/index3/size"):
        try:
            with open(path) as f:
                t = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
        return int(t.rstrip("KMG")) * mult
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--plan", default="target/release/rcomm-plan")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    a = ap.parse_args()

    xch = gather(a.dir, "exchange", lambda o: o["latency_us"])
    red = gather(a.dir, "reduce", lambda o: o["time_us"])
    if 8 not in xch or not red:
        sys.exit(f"{a.dir}/exchange.*.json lacks the 8 B point or reduce.*.json is missing")
    med = {s: statistics.median(v) for s, v in xch.items()}
    alpha = med[8]
    curve = {s: t for s, t in med.items() if s >= 8}
    red_med = {s: statistics.median(v) for s, v in red.items()}
    cpy = gather(a.dir, "copy", lambda o: o["time_us"])
    cpy_med = {s: statistics.median(v) for s, v in cpy.items()}
    ovh = [o["time_us"] for path in sorted(glob.glob(os.path.join(a.dir, "overhead.*.json")))
           for o in lines(path)]
    overhead = max(statistics.median(ovh) - alpha, 0.0) if ovh else None
    l3 = l3_bytes(a.dir)

    def at(m, w, per):
        """The size to read a curve at: m, or when the working set w exceeds the L3, the size
        whose benchmark (working set per·size) holds as much, if larger."""
        return max(m, w / per) if l3 and w > l3 else m

    def beta(m):
        """Bytes/s per direction for m-byte messages (α alone below 16 B)."""
        t = loglog(curve, max(m, 16))
        return max(m, 16) / max((t - alpha) * 1e-6, 1e-12)

    def rate(curve_us, m):
        """Bytes per second at operand size m from a {size: µs} curve."""
        m = max(m, min(curve_us))
        return m / (loglog(curve_us, m) * 1e-6)

    def gamma(m):
        """Bytes folded per second at operand size m."""
        return rate(red_med, m)

    def kappa(m):
        """Bytes copied per second at size m (None without copy.*.json)."""
        return rate(cpy_med, m) if cpy_med else None

    reps = len(xch[8])
    print(f"Link from the 2-rank exchange ({reps} repetitions): α = {alpha:.2f} µs; β(m), GB/s: "
          + ", ".join(f"{fmt_size(s)} {beta(s) / 1e9:.2f}" for s in sorted(curve) if s >= 1024
                      and (s.bit_length() - 1) % 2 == 0)
          + "; reduction γ(m), GB/s: "
          + ", ".join(f"{fmt_size(s)} {gamma(s) / 1e9:.1f}" for s in sorted(red_med)
                      if (s.bit_length() - 1) % 2 == 0)
          + (("; copy κ(m), GB/s: " + ", ".join(f"{fmt_size(s)} {kappa(s) / 1e9:.1f}" for s in sorted(cpy_med)
                                                 if (s.bit_length() - 1) % 2 == 0)) if cpy_med else "")
          + (f"; per-call overhead o = {statistics.median(ovh):.2f} − {alpha:.2f} = {overhead:.2f} µs"
             if overhead is not None else "")
          + (f"; L3 {fmt_size(l3)}" if l3 else "")
          + ".\n")

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
            m, w = size / n, (n + 1) * size
            rows.append(("allreduce", n, size,
                         price(a.plan, "allreduce", n, size, alpha, beta(at(m, w, 4)),
                               gamma(at(m, w, 2)), overhead_us=overhead),
                         ring[size], auto.get(size)))
        for size in sorted(a2a):
            m, w = size / n, 2 * n * size
            k = kappa(at(m, w, 2))
            rows.append(("alltoall", n, size,
                         price(a.plan, "alltoall", n, size, alpha, beta(at(m, w, 4)), kappa=k,
                               overhead_us=overhead),
                         a2a[size], None))
    # PP's transfers: the exchange itself, the link input (not counted).
    coll_sizes = {r[2] for r in rows}
    for size in sorted(xch):
        if size in coll_sizes and size != 8:
            rows.append(("p2p (link input)", 2, size,
                         price(a.plan, "p2p", 2, size, alpha, beta(size)), xch[size], None))

    print("| operation | ranks | size | predicted µs | measured µs, median (min–max) | error | "
          "rcomm's own algorithm µs |")
    print("|---|---|---|---|---|---|---|")
    within = []
    for op, n, size, pred, meas, own in rows:
        m = statistics.median(meas)
        err = (pred - m) / m * 100
        over = n > a.cores
        fit = op.endswith("(link input)")
        if not over and not fit:
            within.append(abs(err) <= 30)
        mark = "" if over or fit else (" ✓" if abs(err) <= 30 else " ✗")
        print(f"| {op} | {n}{' (oversubscribed)' if over else ''} | {fmt_size(size)} | "
              f"{fmt_us(pred)} | {fmt_meas(meas)} | {err:+.0f} %{mark} | "
              f"{fmt_us(statistics.median(own)) if own else ''} |")
    print(f"\nWithin ±30 % where not oversubscribed: {sum(within)} of {len(within)} rows (link-input rows not counted).")
    if bad:
        print(f"WRONG RESULTS: {bad}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
