#!/usr/bin/env python3
"""Markdown tables of min / median / max from a compare-pt2pt.sh result directory.

    pt2pt_table.py target/bench-results/<timestamp> [--show 8,1K,64K,1M,4M,16M]

Reads <dir>/<group>/<impl>.<launch>.json (one JSON object per line: {"size":N,"latency_us":X}
or {"size":N,"bandwidth_MBps":X}) and prints, per group, min / median / max over the launches
of every implementation at every size, the ratio rcomm/peer of the medians, and rcomm's worst
launch against the peer's median (latency: rcomm's max / peer's median; bandwidth: rcomm's
min / peer's median) -- what a user who launches once may get.
"""
import argparse
import json
import os
import statistics
import sys

GROUPS = {
    "shm-lat": "Latency over shared memory, µs (rcomm/peer < 1: rcomm faster)",
    "shm-bw": "Bandwidth over shared memory, MB/s, `-b multiple` on both sides (rcomm/peer > 1: rcomm faster)",
    "tcp-lat": "Latency over TCP loopback, µs (`RCOMM_TRANSPORT=tcp` vs `--mca btl tcp,self`)",
    "tcp-bw": "Bandwidth over TCP loopback, MB/s (`RCOMM_TRANSPORT=tcp` vs `--mca btl tcp,self`)",
    "nocma-bw": "Bandwidth over shared memory without single copy, MB/s "
    "(`RCOMM_SHM_CMA=0` vs `--mca btl_vader_single_copy_mechanism none`)",
}
NAMES = {
    "rcomm": "rcomm",
    "openmpi": "Open MPI",
    "mpich": "MPICH",
    "openmpi-single": "Open MPI `-b single`",
    "mpich-single": "MPICH `-b single`",
}
ORDER = ["rcomm", "openmpi", "mpich", "openmpi-single", "mpich-single"]


def parse_size(s):
    s = s.strip()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    if s and s[-1].lower() in mult:
        return int(s[:-1]) * mult[s[-1].lower()]
    return int(s)


def fmt_size(n):
    for unit, v in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= v and n % v == 0:
            return f"{n // v} {unit}"
    return f"{n} B"


def load(d):
    """runs[group][impl][size] -> list of (launch number, value), one per launch; also launch
    counts."""
    runs, pairs = {}, {}
    for g in sorted(os.listdir(d)):
        gd = os.path.join(d, g)
        if not os.path.isdir(gd):
            continue
        for f in sorted(os.listdir(gd)):
            if not f.endswith(".json"):
                continue
            impl, launch = f.rsplit(".", 2)[0], f.rsplit(".", 2)[1]
            pairs.setdefault(g, {}).setdefault(impl, 0)
            pairs[g][impl] += 1
            with open(os.path.join(gd, f)) as fh:
                for line in fh:
                    line = line.strip()
                    if line.startswith("[") and "] " in line:  # rank prefix, if any
                        line = line.split("] ", 1)[1]
                    if not line.startswith("{"):
                        continue
                    o = json.loads(line)
                    v = o.get("latency_us", o.get("bandwidth_MBps"))
                    runs.setdefault(g, {}).setdefault(impl, {}).setdefault(o["size"], []).append(
                        (int(launch) if launch.isdigit() else 0, v)
                    )
    return runs, pairs


def values(runs):
    """The same without the launch numbers: data[group][impl][size] -> list of values."""
    return {
        g: {i: {s: [v for _, v in lv] for s, lv in sizes.items()} for i, sizes in impls.items()}
        for g, impls in runs.items()
    }

# Classes of the core-to-core latency (ns, one way) a launch ran in: on a VM the host decides.
CLASSES = [("SMT siblings", 0, 35), ("one core complex", 35, 150), ("across core complexes", 150, 1e9)]


def launch_modes(d):
    """(group, impl, launch) -> core-to-core ns, from modes.txt."""
    out = {}
    f = os.path.join(d, "modes.txt")
    if not os.path.exists(f):
        return out
    with open(f) as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 5 and parts[1] == "launch" and "/" in parts[0]:
                g, impl = parts[0].split("/", 1)
                try:
                    out[(g, impl, int(parts[2]))] = float(parts[4])
                except ValueError:
                    pass
    return out


def by_class(g, impls, runs, show, modes):
    """Medians per core-to-core class: each side compared with the other in the same host state."""
    lat = g.endswith("-lat")
    rows = []
    sizes = sorted(set().union(*[set(impls[i]) for i in impls]))
    if show:
        sizes = [s for s in sizes if s in show]
    for name, lo, hi in CLASSES:
        for s in sizes:
            cells = []
            for i in ORDER:
                vals = [v for (k, v) in runs.get(i, {}).get(s, []) if lo <= modes.get((g, i, k), -1) < hi]
                cells.append((i, vals))
            if not any(v for i, v in cells if i == "rcomm"):
                continue
            txt = []
            for i, vals in cells:
                if i in impls:
                    txt.append(f"{NAMES.get(i, i)} {fmt_val(statistics.median(vals), lat)} ({len(vals)})" if vals else f"{NAMES.get(i, i)} –")
            rows.append(f"| {name} | {fmt_size(s)} | " + " · ".join(txt) + " |")
    if not rows:
        return ""
    return "\n".join(
        [f"Medians by the core-to-core class each launch ran in (launches in brackets), {g}:", "", "| class | size | medians |", "|---|---|---|"]
        + rows
        + [""]
    )


def fmt_val(v, lat):
    if lat:
        return f"{v:.2f}" if v < 100 else f"{v:.0f}"
    return f"{v:,.0f}".replace(",", " ")


def table(g, impls, show, pairs):
    lat = g.endswith("-lat")
    peers = [i for i in ORDER if i in impls and i != "rcomm"]
    sizes = sorted(set().union(*[set(impls[i]) for i in impls]))
    if show:
        sizes = [s for s in sizes if s in show]
    n = min(pairs.values()) if pairs else 0
    worst = "max" if lat else "min"
    out = [
        f"### {g}: {GROUPS.get(g, g)}",
        "",
        f"{n} interleaved launches per side: min / median / max; ratios of medians, and rcomm's "
        f"worst launch ({worst}) against the peer's median.",
        "",
    ]
    head = ["size", "rcomm"]
    for p in peers:
        name = NAMES.get(p, p)
        head += [name, f"rcomm / {name}", f"rcomm {worst} / {name} median"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for s in sizes:
        def cell(i):
            vals = impls.get(i, {}).get(s)
            if not vals:
                return "–", None, None
            m = statistics.median(vals)
            w = max(vals) if lat else min(vals)
            txt = " / ".join(fmt_val(v, lat) for v in (min(vals), m, max(vals)))
            return txt, m, w
        rtxt, rm, rw = cell("rcomm")
        row = [fmt_size(s), rtxt]
        for p in peers:
            ptxt, pm, _ = cell(p)
            ratio = f"{rm / pm:.2f}" if rm is not None and pm else "–"
            wr = f"{rw / pm:.2f}" if rw is not None and pm else "–"
            row += [ptxt, ratio, wr]
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    return "\n".join(out)


def modes_summary(lm):
    """The core-to-core probe's one-way latency before each launch (launch_modes), summarised."""
    vals = sorted(lm.values())
    if not vals:
        return ""
    return (
        f"Core-to-core cache-line latency before each launch (`benches/probes/core_to_core`), "
        f"{len(vals)} launches: min {vals[0]:.0f} / median {statistics.median(vals):.0f} / "
        f"max {vals[-1]:.0f} ns one way.\n"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--show", help="comma-separated sizes to show (K/M/G suffixes); default all")
    ap.add_argument("--spread", action="store_true", help="(kept for old commands; the spread is always shown)")
    a = ap.parse_args()
    show = {parse_size(s) for s in a.show.split(",")} if a.show else None
    runs, pairs = load(a.dir)
    data = values(runs)
    if not data:
        print(f"pt2pt_table.py: no results under {a.dir}", file=sys.stderr)
        return 1
    order = [g for g in GROUPS if g in data] + [g for g in data if g not in GROUPS]
    lm = launch_modes(a.dir)
    m = modes_summary(lm)
    if m:
        print(m)
    for g in order:
        print(table(g, data[g], show, pairs.get(g, {})))
        if lm:
            print(by_class(g, data[g], runs[g], show, lm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
