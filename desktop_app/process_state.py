"""What the operating system says of a process of this host (Linux's
``/proc/<pid>/stat``): its state letter, whether it is stopped, and the
words every message uses for a stopped process. Imports nothing of
Flowdesk, so errors, the store and the engine can all use it."""

from __future__ import annotations

import socket


def process_state(pid: int) -> bytes:
    """``pid``'s state letter in ``/proc/<pid>/stat`` (Linux: ``R``, ``S``,
    ``T`` stopped, ``Z`` zombie...), ``b""`` where it cannot be read (no
    ``/proc``: macOS; no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return b""
    # "pid (comm) S ...": comm may hold spaces or parentheses; the state follows the last ")"
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]


def is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state ``T`` or ``t``: Ctrl-Z,
    ``SIGSTOP``, a debugger): it holds its locks and leases and runs nothing
    until it is continued. ``False`` where ``/proc`` cannot tell."""
    return process_state(pid) in (b"T", b"t")


#: what a message says of a stopped process ``{pid}`` and how it goes on
#: (SIGSTOP comes from elsewhere as often as Ctrl-Z: its shell may not be the user's)
STOPPED = "stopped (SIGSTOP or Ctrl-Z): resume it with `kill -CONT {pid}` (or `fg` in its shell)"


def stopped_pid(owner: str) -> int | None:
    """The pid of ``owner``'s process when it is a process of this host
    that :func:`is_stopped`, else ``None`` (running, gone, another host's,
    or no ``/proc`` to tell)."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return None
    return int(pid) if is_stopped(int(pid)) else None
