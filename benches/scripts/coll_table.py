#!/usr/bin/env python3
"""Markdown tables of medians from a compare-coll.sh result directory.

    coll_table.py target/bench-results/coll-<timestamp> [--spread] [--busbw]

Reads <dir>/<op>/<impl>.<size>.<pair>.json (the JSON lines of `rcomm-bench coll --json` and
`osu_like OP --json`: {"op","size","time_us","busbw","wrong","inplace":{...}}) and prints, per
operation and variant (out-of-place, in-place), the median time over pairs of every
implementation at every size, with the ratio rcomm/peer of the medians (< 1: rcomm faster)
and, with two peers, the ratio to the better (faster) peer at that size, named. A variant that
an implementation lacks (bcast has no out-of-place form; allgather, reduce_scatter, alltoall,
reduce, gather and scatter have no in-place one in rcomm) is left out. The rank count comes from
<dir>/machine.txt when compare-coll.sh wrote it there. Any result with wrong elements is
reported and makes the exit status 1.
"""
import argparse
import json
import os
import statistics
import sys

NAMES = {"rcomm": "rcomm", "openmpi": "Open MPI", "mpich": "MPICH"}
ORDER = ["rcomm", "openmpi", "mpich"]
VARIANTS = [("oop", "out-of-place"), ("ip", "in-place")]


def fmt_size(n):
    for unit, v in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= v and n % v == 0:
            return f"{n // v} {unit}"
    return f"{n} B"


def fmt_time(v):
    return f"{v:.2f}" if v < 100 else f"{v:,.0f}".replace(",", " ")


def load(d):
    """data[op][variant][impl][size] -> list of (time_us, busbw); bad: list of wrong results."""
    data, bad = {}, []
    for op in sorted(os.listdir(d)):
        od = os.path.join(d, op)
        if not os.path.isdir(od):
            continue
        for f in sorted(os.listdir(od)):
            if not f.endswith(".json"):
                continue
            impl = f.split(".", 1)[0]
            with open(os.path.join(od, f)) as fh:
                for line in fh:
                    line = line.strip()
                    if line.startswith("[") and "] " in line:  # rank prefix, if any
                        line = line.split("] ", 1)[1]
                    if not line.startswith("{"):
                        continue
                    o = json.loads(line)
                    for key, sub in (("oop", o), ("ip", o.get("inplace"))):
                        if not sub or sub.get("time_us") is None:
                            continue
                        if sub.get("wrong"):
                            bad.append(f"{op} {impl} {key} size {o['size']}: {sub['wrong']} wrong ({f})")
                        v = data.setdefault(o.get("op", op), {}).setdefault(key, {})
                        v.setdefault(impl, {}).setdefault(o["size"], []).append(
                            (sub["time_us"], sub.get("busbw"))
                        )
    return data, bad


def ranks_of(d):
    """The "ranks: N ..." line of machine.txt, or None."""
    try:
        with open(os.path.join(d, "machine.txt")) as fh:
            for line in fh:
                if line.startswith("ranks: "):
                    return line[len("ranks: "):].strip()
    except OSError:
        pass
    return None


def table(op, key, impls, spread, busbw, ranks=None):
    peers = [i for i in ORDER if i in impls and i != "rcomm"]
    sizes = sorted(set().union(*[set(impls[i]) for i in impls]))
    npairs = min(len(v) for i in impls for v in impls[i].values())
    label = dict(VARIANTS)[key]
    out = [
        f"### {op}, {label}: time per call, µs (rcomm/peer < 1: rcomm faster)",
        "",
        (f"Ranks: {ranks}. " if ranks else "")
        + f"{npairs} interleaved launches per side: min / median / max; ratios of medians.",
        "",
    ]
    head = ["size", "rcomm"]
    if busbw:
        head.append("rcomm busbw GB/s")
    for p in peers:
        head += [NAMES.get(p, p), f"rcomm / {NAMES.get(p, p)}"]
    if len(peers) > 1:
        head.append("rcomm / better peer")
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for s in sizes:
        def cell(i):
            vals = [t for t, _ in impls.get(i, {}).get(s, [])]
            if not vals:
                return "–", None
            m = statistics.median(vals)
            txt = " / ".join(fmt_time(v) for v in (min(vals), m, max(vals)))
            return txt, m

        rtxt, rm = cell("rcomm")
        row = [fmt_size(s), rtxt]
        if busbw:
            bws = [b for _, b in impls.get("rcomm", {}).get(s, []) if b is not None]
            row.append(f"{statistics.median(bws):.2f}" if bws else "–")
        best = None
        for p in peers:
            ptxt, pm = cell(p)
            row += [ptxt, f"{rm / pm:.2f}" if rm is not None and pm else "–"]
            if pm and (best is None or pm < best[1]):
                best = (p, pm)
        if len(peers) > 1:
            ok = rm is not None and best is not None
            row.append(f"{rm / best[1]:.2f} ({NAMES.get(best[0], best[0])})" if ok else "–")
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--spread", action="store_true", help="(kept for old commands; the spread is always shown)")
    ap.add_argument("--busbw", action="store_true", help="also show rcomm's median busbw")
    a = ap.parse_args()
    data, bad = load(a.dir)
    ranks = ranks_of(a.dir)
    if not data:
        print(f"coll_table.py: no results under {a.dir}", file=sys.stderr)
        return 1
    for op in sorted(data):
        for key, _ in VARIANTS:
            impls = data[op].get(key)
            if impls and "rcomm" in impls:
                print(table(op, key, impls, a.spread, a.busbw, ranks))
    for b in bad:
        print(f"WRONG RESULTS: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
