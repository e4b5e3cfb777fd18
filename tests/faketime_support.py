"""Processes whose wall clock is off by a fixed offset, through libfaketime
(Debian's ``faketime`` package) preloaded directly.

The ``faketime`` wrapper is not used: it keeps a semaphore and a shared
memory segment named after its own process id in ``/dev/shm`` and removes
them only when it exits normally. A wrapper a test kills (SIGKILL, a
timeout) leaves them behind, and a later wrapper that is given the same
process id fails with ``faketime: sem_open: File exists`` before it runs
anything. Preloading the library with ``FAKETIME`` set (the format of the
wrapper's ``-f``: ``-1h``, ``+1d``) keeps no such state.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

#: where distributions put libfaketime (single-threaded, the wrapper's
#: default, and multi-threaded)
DIRS = (
    "/usr/lib/x86_64-linux-gnu/faketime",
    "/usr/lib/aarch64-linux-gnu/faketime",
    "/usr/lib/faketime",
    "/usr/local/lib/faketime",
)


def libfaketime(threads: bool = False) -> str:
    """The path of libfaketime (``threads``: its multi-threaded build);
    the test is skipped without one, failed instead under ``CI=true``
    (``.ci/run`` installs the package)."""
    name = "libfaketimeMT.so.1" if threads else "libfaketime.so.1"
    for folder in DIRS:
        if (Path(folder) / name).exists():
            return str(Path(folder) / name)
    message = f"needs libfaketime (apt install faketime): no {name} in {DIRS}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def skewed_env(offset: str) -> dict[str, str]:
    """Environment variables that put a process's wall clock ``offset``
    (``-1h``, ``+1d``) off the system's, as ``faketime -f OFFSET`` does."""
    return {"LD_PRELOAD": libfaketime(), "FAKETIME": offset}


def skewed_prefix(offset: str) -> str:
    """:func:`skewed_env` as a shell prefix (``env LD_PRELOAD=… FAKETIME=…``)
    for a command line typed into a terminal."""
    return "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in skewed_env(offset).items())
