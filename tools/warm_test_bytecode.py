"""Write the tests' bytecode once, on every CPU, before ``make test``'s workers start.

Each pytest-xdist worker collects the whole suite itself. In a fresh clone
every worker would then rewrite the asserts of all the test modules (and
compile Flowdesk) at the same time, each for itself: ~20 s of CPU per
worker, against ~5 s once the rewritten modules are on disk. Here the test
files are split across one ``pytest --collect-only`` per CPU, which writes
each module's bytecode once; the workers then read it. Each collection is
given the same folders and ``--ignore`` for the files of the others: given
its own files as arguments instead, pytest took twice the CPU to collect
them (on two CPUs: 46 s of CPU and 25 s of wall time against 24 s and 13 s,
from a fresh clone).

Usage: ``python tools/warm_test_bytecode.py [PYTEST_ARGS...]``: the
arguments ``make test`` gives pytest; the test files and folders among them
(a ``::`` node id counts as its file) are the ones warmed, else the whole
``tests`` folder. Always exits 0: a module that fails to collect is
reported by the real run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_roots(pytest_args: list[str]) -> list[str]:
    """The paths under ``tests`` among ``pytest_args`` (a ``::`` node id
    counts as its file), else ``tests`` itself."""
    tests = Path("tests").resolve()
    given = [Path(a.split("::", 1)[0]) for a in pytest_args if not a.startswith("-")]
    roots = [p for p in given if p.exists() and p.resolve().is_relative_to(tests)]
    return sorted({str(p) for p in roots}) or ["tests"]


def test_modules(roots: list[str]) -> list[str]:
    """The test modules a collection of ``roots`` reads (each collection
    also reads the conftest files it needs)."""
    found = {p for r in map(Path, roots) for p in ([r] if r.is_file() else r.rglob("test_*.py"))}
    return sorted(str(p) for p in found)


def main(argv: list[str]) -> int:
    roots = test_roots(argv)
    files = test_modules(roots)
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    jobs = max(1, len(os.sched_getaffinity(0)))
    groups = [set(files[i::jobs]) for i in range(jobs)]
    procs = [
        subprocess.Popen(
            [*collect, *roots, *(f"--ignore={f}" for f in files if f not in group)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for group in groups
        if group
    ]
    for proc in procs:
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
