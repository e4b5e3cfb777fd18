"""A process outside Flowdesk holding a SQLite file's write lock (a Python
``sqlite3`` shell left in an open transaction), for tests of what Flowdesk
says and does while the file stays locked."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOLD = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "c.execute('BEGIN IMMEDIATE')\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


@contextmanager
def write_lock_held(db: Path) -> Iterator[subprocess.Popen[str]]:
    """Hold ``db``'s write lock in another process until the block ends, or
    until :func:`release` is called on the process it yields."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder
    finally:
        release(holder)


def release(holder: subprocess.Popen[str]) -> None:
    """End the holder's transaction and process (the lock is free after)."""
    if holder.poll() is None:
        holder.communicate(input="", timeout=60)
