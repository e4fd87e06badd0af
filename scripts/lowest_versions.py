"""Reads `cargo metadata` of tests/downstream on stdin; prints `NAME LOCKED LOWEST` for every
direct registry dependency of rcomm's library crates that the lockfile resolved, LOWEST being the
smallest version the declared requirement admits (`^0.2.150` -> 0.2.150, `1` -> 1.0.0)."""
import json
import re
import sys

LIBS = {
    "rcomm-core",
    "rcomm-runtime",
    "rcomm-transport",
    "rcomm-kernels",
    "rcomm-planner",
    "rcomm-mpi",
    "rcomm-mpi-derive",
    "rcomm-launcher",
}


def lowest(req):
    m = re.fullmatch(r"[\^=~]?\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?(-[0-9A-Za-z.-]+)?", req.strip())
    if not m:
        raise SystemExit(f"lowest_versions.py: cannot read the requirement {req!r}")
    major, minor, patch, pre = m.groups()
    return f"{major}.{minor or 0}.{patch or 0}{pre or ''}"


def admits(req_low, version):
    """Whether `version` is in the same semver-compatible range as the requirement's lowest."""
    a, b = req_low.split("-")[0].split("."), version.split("-")[0].split(".")
    if a[0] != "0":
        return a[0] == b[0]
    if a[1] != "0":
        return a[:2] == b[:2]
    return a == b


meta = json.load(sys.stdin)
locked = {}
for p in meta["packages"]:
    if p["source"] and p["source"].startswith("registry+"):
        locked.setdefault(p["name"], []).append(p["version"])
seen = set()
for p in meta["packages"]:
    if p["name"] not in LIBS or p["source"] is not None:
        continue
    for d in p["dependencies"]:
        if d["kind"] is not None or d.get("path") or d["name"] not in locked:
            continue
        low = lowest(d["req"])
        for v in locked[d["name"]]:
            if admits(low, v) and (d["name"], v) not in seen:
                seen.add((d["name"], v))
                print(d["name"], v, low)
