"""Owner ids of the processes that hold leases and outbox claims.

An owner id is ``"<host>:<pid>:<nonce>"``. On one host a lease held by a
process that no longer exists can be taken over at once instead of waiting
for it to expire (:func:`owner_is_dead`), and one held by a process that
still runs is never taken over, whatever the clocks say
(:func:`owner_is_alive`); owners on other hosts are never presumed dead or
alive (their leases expire).
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Literal

from desktop_app.process_state import process_state


def new_owner() -> str:
    """A fresh owner id for this process: ``"<host>:<pid>:<6 hex>@<start>"``,
    ``<start>`` the process's start time (clock ticks after boot, field 22 of
    ``/proc/<pid>/stat``; left out, with its ``@``, where there is no
    ``/proc``), so a pid the system gave to another process since (after a
    reboot, or a wrap-around) is not taken for the owner."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    start = _start_ticks(os.getpid())
    return owner if start is None else f"{owner}@{start}"


Liveness = Literal["dead", "alive", "unknown"]


def liveness(owner: str) -> Liveness:
    """What this host knows of ``owner`` (``host:pid:nonce``): ``"dead"``, a
    process of this host that no longer exists (or a zombie, or whose pid
    another process has now: its recorded start time differs); ``"alive"``, a
    process of this host that exists (this one included); ``"unknown"``, an
    owner on another host or an id that is not ``host:pid:…``: only its
    lease's expiry can tell.

    Liveness beats clocks: a lease of an ``"alive"`` owner is never taken
    over, whatever the clocks say; a ``"dead"`` owner's lease is taken over at
    once, before it expires."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return "unknown"
    pid = int(pid_text)
    if pid == os.getpid() and _recorded_start(owner) in (None, _start_ticks(pid)):
        return "alive"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        pass  # another user's process: it exists
    if _is_zombie(pid):
        return "dead"
    recorded = _recorded_start(owner)
    if recorded is not None and recorded != _start_ticks(pid):
        return "dead"  # the pid names another process now: the owner exited
    return "alive"


def _recorded_start(owner: str) -> int | None:
    """The start time an owner id records after its ``@``, if any."""
    _, at, start = owner.rpartition("@")
    return int(start) if at and start.isdigit() else None


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat``
    field 22), or ``None`` where it cannot be read (no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # field 3 (state) onwards
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def owner_is_dead(owner: str) -> bool:
    """True when ``owner`` (``host:pid:nonce``) names a process on this host
    that no longer exists. Owners on other hosts are never presumed dead."""
    return liveness(owner) == "dead"


def owner_is_alive(owner: str) -> bool:
    """True when ``owner`` names a process of this host that still exists:
    its lease is never taken over, even when it has expired by some clock."""
    return liveness(owner) == "alive"


def _is_zombie(pid: int) -> bool:
    """True when ``pid`` has exited but is not reaped yet (state ``Z``,
    Linux): a process killed with ``kill -9`` stays a zombie until its
    parent (or init) waits for it, and runs nothing more. Where ``/proc``
    is missing (macOS) the process counts as alive."""
    return process_state(pid) == b"Z"


Holding = Literal["free", "dead", "expired", "held"]


def holding(owner: str | None, expires_at: float | None, now: float) -> Holding:
    """Who holds a lease of ``owner`` running until ``expires_at`` (UTC epoch
    s; ``None`` counts as expired), judged at ``now``: ``"free"`` (no owner),
    ``"dead"`` (a process of this host that exited: taken over at once,
    whatever its expiry), ``"expired"`` (an owner on another host whose lease
    ran out) or ``"held"`` (an owner alive on this host, whatever the clocks
    say, or another host's owner whose lease still runs). The one rule the
    engine, the agent runtime, recovery and every status display use."""
    if owner is None:
        return "free"
    seen = liveness(owner)
    if seen == "unknown":
        return "expired" if (expires_at or 0.0) <= now else "held"
    return "dead" if seen == "dead" else "held"


def lease_abandoned(owner: str | None, expires_at: float | None, now: float) -> bool:
    """True when no live process holds the lease (:func:`holding` is not
    ``"held"``)."""
    return holding(owner, expires_at, now) != "held"
