"""Whether the app's terminal is still there.

A terminal emulator that crashes, an ssh connection that drops, or a
``script``/``tmux`` whose pty is killed leaves the app reading a hung-up
tty. The kernel sends ``SIGHUP`` only to the session's leader: when that is
a shell or ``make`` (``make run``), the app gets no signal, every read of
its terminal returns end-of-file at once, and Textual's input thread loops
on it (measured: ~60% of a core, for ever, with the engine still holding
its runs' leases). The app polls its terminal for ``POLLHUP`` instead
(:func:`hung_up`, once a second) and quits as on ``q``.
"""

from __future__ import annotations

import select
import sys

#: seconds between two looks at the terminal
CHECK_S = 1.0


def terminal_fd() -> int | None:
    """The file descriptor the app reads keys from (the process's original
    stdin, as Textual's driver reads it), or ``None`` when it is not a
    terminal (tests, a pipe) or the platform has no ``poll`` (Windows): then
    there is nothing to watch."""
    stdin = sys.__stdin__
    if stdin is None or not hasattr(select, "poll"):
        return None
    try:
        fd = stdin.fileno()
    except (OSError, ValueError):  # closed, or replaced by a stream with no descriptor
        return None
    return fd if stdin.isatty() else None


def hung_up(fd: int) -> bool:
    """Whether the terminal ``fd`` was hung up (its other end closed:
    ``POLLHUP``, ``POLLERR`` or ``POLLNVAL``); never reads from it, so no
    key is taken from the app. Costs one ``poll`` with no wait."""
    poller = select.poll()
    poller.register(fd, 0)  # no event asked: only the hang-up conditions are reported
    return bool(poller.poll(0))
