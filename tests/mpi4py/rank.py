"""One rank of one mpi4py test module, run by tests/mpi4py/run.py under a launcher.

    python rank.py TESTDIR OUTDIR MODULE [runner options...]

Runs mpi4py's own test runner (TESTDIR/main.py, from mpi4py's sdist) on the test module
MODULE and writes OUTDIR/rank<R>.json: the ids of the tests that passed, failed, errored and
were skipped at this rank, each failure's last traceback line (for classifying it), and the
counts. run.py counts a test as passing when it passed at every rank.
"""

import json
import os
import sys
import unittest

testdir, outdir, module = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, testdir)
sys.dont_write_bytecode = True

import main as mpi4py_main  # noqa: E402  (mpi4py's test runner, from its sdist)


class Result(unittest.TextTestResult):
    """unittest's text result that also keeps the ids of the tests that passed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed.append(test.id())


class Runner(unittest.TextTestRunner):
    resultclass = Result


def last_line(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip()[:300] if lines else ""


class Program(mpi4py_main.TestProgram):
    def runTests(self):
        try:
            super().runTests()
        except SystemExit:
            pass
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
        r = self.result
        record = {
            "module": module,
            "rank": rank,
            "size": MPI.COMM_WORLD.Get_size(),
            "run": r.testsRun,
            "passed": sorted(r.passed),
            "failed": {t.id(): last_line(tb) for t, tb in r.failures},
            "errors": {t.id(): last_line(tb) for t, tb in r.errors},
            "skipped": {t.id(): str(why)[:200] for t, why in r.skipped},
            "unexpected_successes": [t.id() for t in r.unexpectedSuccesses],
        }
        path = os.path.join(outdir, f"rank{rank}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
        os.replace(path + ".tmp", path)


Program(
    module=None,
    argv=[os.path.join(testdir, "main.py"), *sys.argv[4:], "-i", f"^{module}.py$"],
    testRunner=Runner,
    exit=False,
)
