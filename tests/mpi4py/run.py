#!/usr/bin/env python3
"""mpi4py's own test suite on an MPI-5.0 ABI library: rcomm's libmpi_abi.so.1 or MPICH's.

    tests/mpi4py/run.py [--lib rcomm|mpich] [--ranks 1,2,3] [--modules REGEX]
                        [--exclude-modules REGEX] [--timeout S] [--deadline S]
                        [--rcomm-run PATH] [--rcomm-lib PATH] [--out DIR] [--setup-only]

Set-up (once per target dir, under $CARGO_TARGET_DIR/mpi4py, or target/mpi4py): a venv with
MPICH's wheel from PyPI (mpich==5.0.2: its libmpi_abi.so.1, mpi_abi.h, mpicc_abi and mpiexec)
and mpi4py==4.1.2 built from its PyPI sdist with MPI4PY_BUILD_MPIABI=1 and MPICC=mpicc_abi
(the PyPI wheel of 4.1.2 carries only the MPICH and Open MPI variants, no standard-ABI one);
the sdist's test/ is unpacked beside it. Nothing of it is committed.

Run: every test module of mpi4py's suite (test/test_*.py) is launched on its own, at each rank
count, with mpi4py's runner (test/main.py, through tests/mpi4py/rank.py) and a time limit per
launch (--timeout, default 180 s; the process group is killed past it) and for the whole run
(--deadline, default 1800 s; modules left unrun count 0). One launch per module keeps a crash or
a hang in one module from taking the others' results with it.
  --lib rcomm: `rcomm-run -n N python rank.py ...`, MPI4PY_LIBMPI=<rcomm's libmpi_abi.so>
               (mpi4py dlopens it before its extension, whose NEEDED libmpi_abi.so.1 then binds
               to it by SONAME), MPI4PY_MPIABI=mpiabi.
  --lib mpich: MPICH's `mpiexec -n N` from the wheel, MPI4PY_LIBMPI=<wheel's libmpi_abi.so.1>.
A test passes when it passed at every rank. The pass count is printed per rank count and in
all, with every failing test, its status (failed, error, skipped, or the launch's fate:
timeout, crash) and the last line of its traceback; summary.json and counts.txt (lines
"<ranks> <passed>") in --out (default
$target/mpi4py/results/<lib>-<timestamp>) has all of it, rank<R>.json and the launch's output
per module and rank count beside it. Exit status 0 when the run completed (test failures are
counts, not errors), 2 on a set-up error.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

MPI4PY = "4.1.2"
MPICH = "5.0.2"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def log(msg):
    print(f"[mpi4py-suite] {msg}", file=sys.stderr, flush=True)


def target_dir():
    t = os.environ.get("CARGO_TARGET_DIR")
    return Path(t) if t else ROOT / "target"


def sh(cmd, **kw):
    log("+ " + " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def setup(base):
    """The venv with MPICH's wheel and an ABI build of mpi4py, and mpi4py's test/ (cached)."""
    venv = base / f"venv-{MPI4PY}-mpich{MPICH}"
    py = venv / "bin" / "python"
    done = venv / ".rcomm-ready"
    testdir = base / f"mpi4py-{MPI4PY}" / "test"
    if done.exists() and (testdir / "main.py").exists():
        return py, venv, testdir
    base.mkdir(parents=True, exist_ok=True)
    if not py.exists():
        sh([sys.executable, "-m", "venv", venv])
    pip = [py, "-m", "pip", "-q", "--disable-pip-version-check"]
    # The downloads stay in the target dir: a venv made again (a new Python, a half-made one)
    # fetches nothing from PyPI but mpi4py's build requirements.
    dl = base / "download"
    wheel = f"mpich-{MPICH}-*.whl"
    if not any(dl.glob(wheel)):
        sh([*pip, "download", "--no-deps", "--only-binary=:all:", "-d", dl, f"mpich=={MPICH}"])
    sh([*pip, "install", sorted(dl.glob(wheel))[-1]])
    sdist = dl / f"mpi4py-{MPI4PY}.tar.gz"
    if not sdist.exists():
        sh([*pip, "download", "--no-deps", "--no-binary", "mpi4py", "-d", dl, f"mpi4py=={MPI4PY}"])
    with tarfile.open(sdist) as tf:
        tf.extractall(base, filter="data")
    # -O1 without debug info: Cython's MPI.c is large and setuptools' default -O3 -g makes its
    # compile the longest step of the set-up; the suite's time is in MPI and Python.
    env = dict(os.environ, MPI4PY_BUILD_MPIABI="1", MPICC=str(venv / "bin" / "mpicc_abi"),
               CFLAGS="-O1 -g0")
    sh([*pip, "install", "--no-binary", "mpi4py", "--no-cache-dir", sdist], env=env)
    # The build must be the standard-ABI one: a plain MPI.<python tag>.so that needs
    # libmpi_abi.so.1 (the wheel's variants are MPI.mpich.* and MPI.openmpi.*).
    out = subprocess.run(
        [py, "-c", "import mpi4py, os; print(os.path.dirname(mpi4py.__file__))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    exts = [p for p in Path(out).glob("MPI.*.so") if p.name.count(".") == 2]
    if not exts:
        raise SystemExit(f"mpi4py's ABI build left no MPI.*.so in {out}")
    needed = subprocess.run(["readelf", "-d", exts[0]], capture_output=True, text=True).stdout
    if "libmpi_abi.so.1" not in needed:
        raise SystemExit(f"{exts[0]} does not need libmpi_abi.so.1:\n{needed}")
    done.write_text(f"mpi4py {MPI4PY} (MPI4PY_BUILD_MPIABI=1), mpich {MPICH}\n")
    return py, venv, testdir


def modules(testdir, include, exclude):
    names = sorted(p.stem for p in testdir.glob("test_*.py"))
    if include:
        names = [n for n in names if re.search(include, n)]
    if exclude:
        names = [n for n in names if not re.search(exclude, n)]
    return names


def launch(cmd, env, timeout, logpath):
    """Runs one launch in its own process group; kills the group past the timeout."""
    t0 = time.monotonic()
    with open(logpath, "wb") as logf:
        p = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
            fate = "ok" if rc == 0 else f"exit {rc}"
        except subprocess.TimeoutExpired:
            fate = "timeout"
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    # Whatever the group left behind (a rank that outlived its launcher) goes too.
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return fate, time.monotonic() - t0


def merge(module, n, outdir, fate):
    """Per-test outcome over the ranks: passed only where every rank passed it."""
    recs = []
    for r in range(n):
        f = outdir / f"rank{r}.json"
        if f.exists():
            recs.append(json.loads(f.read_text()))
    res = {"module": module, "ranks": n, "fate": fate, "reported": len(recs),
           "passed": [], "failing": {}}
    if not recs:
        res["failing"][module] = f"no rank reported ({fate})"
        return res
    ids = set()
    for rec in recs:
        ids |= set(rec["passed"]) | set(rec["failed"]) | set(rec["errors"]) | set(rec["skipped"])
    for t in sorted(ids):
        why = None
        for rec in recs:
            if t in rec["errors"]:
                why = why or f"error [{rec['rank']}]: {rec['errors'][t]}"
            elif t in rec["failed"]:
                why = why or f"failed [{rec['rank']}]: {rec['failed'][t]}"
            elif t in rec["skipped"]:
                why = why or f"skipped [{rec['rank']}]: {rec['skipped'][t]}"
            elif t not in rec["passed"]:
                why = why or f"not run at rank {rec['rank']}"
        if len(recs) < n:
            why = why or f"ranks missing ({len(recs)}/{n} reported; {fate})"
        if why is None:
            res["passed"].append(t)
        else:
            res["failing"][t] = why
    if fate != "ok" and not res["failing"]:
        res["failing"][module] = f"launch: {fate}"
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", choices=["rcomm", "mpich"], default="rcomm")
    ap.add_argument("--ranks", default="1,2,3")
    ap.add_argument("--modules", default=None, help="regex: only the modules it finds")
    ap.add_argument("--exclude-modules", default=None, help="regex: leave these modules out")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per launch")
    ap.add_argument("--deadline", type=float, default=1800.0, help="seconds for the whole run")
    ap.add_argument("--rcomm-run", default=None)
    ap.add_argument("--rcomm-lib", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--setup-only", action="store_true")
    a = ap.parse_args()

    base = target_dir() / "mpi4py"
    try:
        py, venv, testdir = setup(base)
    except (subprocess.CalledProcessError, OSError) as e:
        log(f"set-up failed: {e}")
        return 2
    if a.setup_only:
        return 0

    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MPI4PY_MPIABI="mpiabi")
    if a.lib == "rcomm":
        prof = [target_dir() / p for p in ("release", "debug")]
        run = Path(a.rcomm_run) if a.rcomm_run else next(
            (p / "rcomm-run" for p in prof if (p / "rcomm-run").exists()), None)
        lib = Path(a.rcomm_lib) if a.rcomm_lib else next(
            (p / "libmpi_abi.so" for p in prof if (p / "libmpi_abi.so").exists()), None)
        if run is None or lib is None or not run.exists() or not lib.exists():
            log(f"rcomm-run ({run}) or libmpi_abi.so ({lib}) not built: "
                "cargo build -p rcomm-launcher -p rcomm-abi")
            return 2
        env["MPI4PY_LIBMPI"] = str(lib.resolve())
        # rcomm-run links this library as libmpi_abi.so.1 first on the ranks' library path:
        # mpi4py's extension names libmpi_abi.so.1 with a RUNPATH to the venv, which holds
        # MPICH's, and only LD_LIBRARY_PATH comes before a RUNPATH.
        env["RCOMM_ABI_LIB"] = str(lib.resolve())
        launcher = [str(run), "-n"]
        want = "rcomm"
    else:
        env["MPI4PY_LIBMPI"] = str(venv / "lib" / "libmpi_abi.so.1")
        launcher = [str(venv / "bin" / "mpiexec"), "-n"]
        want = "MPICH"
    # Which library the ranks really load: a count taken on the other one would be a lie.
    probe = subprocess.run(
        [*launcher, "1", str(py), "-c",
         "from mpi4py import MPI; print('LIBRARY', MPI.Get_library_version().split()[0])"],
        env=env, capture_output=True, text=True, timeout=120)
    got = [ln.split("LIBRARY", 1)[1].strip() for ln in probe.stdout.splitlines() if "LIBRARY" in ln]
    if probe.returncode != 0 or got != [want]:
        log(f"the ranks do not load {want}'s library (they report {got}, exit "
            f"{probe.returncode}):\n{probe.stdout}{probe.stderr}")
        return 2
    log(f"the ranks load {want}'s libmpi_abi.so.1")
    ranks = [int(x) for x in a.ranks.split(",") if x]
    out = Path(a.out) if a.out else base / "results" / f"{a.lib}-{time.strftime('%Y%m%dT%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    mods = modules(testdir, a.modules, a.exclude_modules)
    log(f"{len(mods)} modules at ranks {ranks} on {a.lib}: {env['MPI4PY_LIBMPI']}; results in {out}")

    t_start = time.monotonic()
    summary = {"lib": a.lib, "libmpi": env["MPI4PY_LIBMPI"], "mpi4py": MPI4PY,
               "ranks": {}, "total_passed": 0}
    for n in ranks:
        per = {"passed": 0, "modules": {}}
        for m in mods:
            left = a.deadline - (time.monotonic() - t_start)
            mdir = out / f"n{n}" / m
            mdir.mkdir(parents=True, exist_ok=True)
            if left < 5:
                res = merge(m, n, mdir, "not run (deadline)")
                secs = 0.0
            else:
                cmd = [*launcher, str(n), str(py), str(HERE / "rank.py"), str(testdir), str(mdir), m]
                fate, secs = launch(cmd, env, min(a.timeout, left), mdir / "output.txt")
                res = merge(m, n, mdir, fate)
            res["seconds"] = round(secs, 1)
            per["modules"][m] = res
            per["passed"] += len(res["passed"])
            log(f"n={n} {m}: {len(res['passed'])} passed, {len(res['failing'])} failing "
                f"({res['fate']}, {secs:.1f} s)")
        summary["ranks"][str(n)] = per
        summary["total_passed"] += per["passed"]
    summary["seconds"] = round(time.monotonic() - t_start, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    # One line per rank count, "<ranks> <passed>", for tests/tests/mpi4py.rs's floor.
    (out / "counts.txt").write_text(
        "".join(f"{n} {per['passed']}\n" for n, per in summary["ranks"].items()))

    for n, per in summary["ranks"].items():
        print(f"== {a.lib}, {n} rank(s): {per['passed']} tests passed")
        for m, res in per["modules"].items():
            for t, why in res["failing"].items():
                print(f"  {t}: {why}")
    counts = ", ".join(f"n={n}: {per['passed']}" for n, per in summary["ranks"].items())
    print(f"PASSED {summary['total_passed']} ({counts}) in {summary['seconds']} s; {out}/summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
