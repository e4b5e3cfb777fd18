"""SIGTERM stops a foreground command (``run``, ``start``, ``resume`` ...)
as Ctrl-C does, and a SIGTERM is never lost.

The handler raises :class:`Terminated` in the main thread, wherever it is.
CPython runs a signal's handler at the next instruction of the main thread,
which can be inside a finalizer (an object's ``__del__``, a generator closed
by the garbage collector); an exception raised there is printed as
"Exception ignored" and dropped, and the command went on, its run to the end
(seen once in CI: SIGTERM at file 325 of 3,000, the digest ran to 3,000 and
exited 0). So the handler also records the signal, and the run's next event
(:func:`raise_if_lost`, subscribed by :func:`watch` to the engine's events:
every step started and finished, every progress report) raises it again
until the command's handler has taken it (:func:`taken`).

Ctrl-C keeps Python's own handler: ``asyncio.run`` cancels its main task on
it (an agent's tool call in flight ends and is saved first) only when that
handler is installed.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from desktop_app.flow.events import EventBus

log = logging.getLogger(__name__)

#: the signal whose :class:`Terminated` has not reached the command's handler yet
_pending: int | None = None
#: whether :func:`install` installed the handler in this process
_installed = False


class Terminated(KeyboardInterrupt):
    """SIGTERM in a foreground command, raised in the main thread where
    Ctrl-C raises ``KeyboardInterrupt`` (a subclass of it, so the run
    stops exactly as on Ctrl-C: the step in flight is cut off before it
    saves, and runs once more, from its start, when the run is resumed;
    its lease is given back). ``args[0]``: the signal number."""


def _terminated(signum: int, _frame: object) -> None:
    global _pending
    _pending = signum
    raise Terminated(signum)


def install() -> None:
    """Make SIGTERM raise :class:`Terminated` in this process. Only the main
    thread can install a handler: elsewhere nothing changes."""
    global _installed
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
        _installed = True


def watch(events: EventBus) -> None:
    """Check for a lost SIGTERM at every event of ``events`` (a run's steps
    and progress), when this process installed the handler; else nothing
    (a bus with no subscriber costs a run nothing)."""
    if _installed:
        events.subscribe(lambda _event: raise_if_lost())


def raise_if_lost() -> None:
    """Raise :class:`Terminated` again when a SIGTERM came and its first
    raise has not reached the command's handler (it was raised inside a
    finalizer and dropped); nothing otherwise (a module variable read).

    Raises:
        Terminated: a SIGTERM is pending.
    """
    if _pending is not None:
        log.warning("a SIGTERM was dropped inside a finalizer: the run stops now")
        raise Terminated(_pending)


def taken() -> None:
    """The command's handler has taken the :class:`Terminated`: nothing is
    pending any more."""
    global _pending
    _pending = None
