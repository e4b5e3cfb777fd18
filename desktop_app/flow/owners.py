"""Owner ids of the processes that hold leases and outbox claims.

An owner id is ``"<host>:<pid>:<nonce>"``. On one host a lease held by a
process that no longer exists can be taken over at once instead of waiting
for it to expire (:func:`owner_is_dead`); owners on other hosts are never
presumed dead (their leases expire).
"""

from __future__ import annotations

import os
import socket
import uuid


def new_owner() -> str:
    """A fresh owner id for this process: ``"<host>:<pid>:<6 hex>"``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def owner_is_dead(owner: str) -> bool:
    """True when ``owner`` (``host:pid:nonce``) names a process on this host
    that no longer exists. Owners on other hosts are never presumed dead."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """True when ``pid`` has exited but is not reaped yet (state ``Z`` in
    ``/proc/<pid>/stat``, Linux): a process killed with ``kill -9`` stays a
    zombie until its parent (or init) waits for it, and runs nothing more.
    Where ``/proc`` is missing (macOS) the process counts as alive."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "pid (comm) S ...": comm may hold spaces or parentheses; the state follows the last ")"
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z"
