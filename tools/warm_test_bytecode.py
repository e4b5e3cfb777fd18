"""Write the tests' bytecode once, on every CPU, before ``make test``'s workers start.

Each pytest-xdist worker collects the whole suite itself. In a fresh clone
every worker would then rewrite the asserts of all the test modules (and
compile Flowdesk) at the same time, each for itself: ~20 s of CPU per
worker, against ~5 s once the rewritten modules are on disk. Here the test
files are split across one ``pytest --collect-only`` per CPU, which writes
each module's bytecode once; the workers then read it.

Usage: ``python tools/warm_test_bytecode.py [TESTS_DIR]`` (default ``tests``).
Always exits 0: a module that fails to collect is reported by the real run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "tests")
    # the test modules (each run collects the conftest files it needs)
    files = sorted(str(p) for p in root.rglob("test_*.py"))
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    jobs = max(1, len(os.sched_getaffinity(0)))
    groups = [files[i::jobs] for i in range(jobs)]
    procs = [
        subprocess.Popen(
            [*collect, *group],
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
