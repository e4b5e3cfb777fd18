"""Ctrl-C and SIGTERM stop a foreground command (``run``, ``start``,
``resume`` ...), and neither is lost.

SIGTERM's handler (:func:`install`) raises :class:`Terminated` in the main
thread, as Python's own handler raises ``KeyboardInterrupt`` on Ctrl-C.
CPython runs a signal's handler at the next instruction of the main thread,
which can be inside a finalizer (an object's ``__del__``, a generator
closed by the garbage collector); an exception raised there is printed as
"Exception ignored" and dropped, and the command went on, its run to the end
(seen once in CI: SIGTERM at file 325 of 3,000, the digest ran to 3,000 and
exited 0; found again by raising ``KeyboardInterrupt`` at every 50th Python
call of a digest: 5 of 1,360 runs went on to exit 0). So a stop is
recorded, by SIGTERM's handler and, for Ctrl-C, by the hook Python calls
for a dropped exception (``sys.unraisablehook``), and the run's next event
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
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from desktop_app.flow.events import EventBus

log = logging.getLogger(__name__)

#: the signal whose stop has not reached the command's handler yet
#: (``SIGTERM``: raised, maybe dropped; ``SIGINT``: dropped)
_pending: int | None = None
#: whether :func:`install` ran in this process
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


def _dropped(unraisable: Any) -> None:
    """``sys.unraisablehook``: a stop dropped inside a finalizer is pending;
    every dropped exception is still printed as Python prints it."""
    global _pending
    exc = unraisable.exc_value
    if isinstance(exc, Terminated) and exc.args:
        _pending = exc.args[0]
    elif isinstance(exc, KeyboardInterrupt):
        _pending = signal.SIGINT
    sys.__unraisablehook__(unraisable)


def install() -> None:
    """Make SIGTERM raise :class:`Terminated` in this process, and record a
    stop dropped inside a finalizer. Only the main thread can install a
    handler: elsewhere nothing changes."""
    global _installed
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
        sys.unraisablehook = _dropped
        _installed = True


def watch(events: EventBus) -> None:
    """Check for a lost stop at every event of ``events`` (a run's steps and
    progress), when :func:`install` ran in this process; else nothing (a
    bus with no subscriber costs a run nothing)."""
    if _installed:
        events.subscribe(lambda _event: raise_if_lost())


def raise_if_lost() -> None:
    """Raise the stop again when a Ctrl-C or SIGTERM came and has not
    reached the command's handler (dropped inside a finalizer); nothing
    otherwise (a module variable read).

    Raises:
        Terminated: a SIGTERM is pending.
        KeyboardInterrupt: a Ctrl-C is pending.
    """
    if _pending is not None:
        name = signal.Signals(_pending).name
        log.warning("a %s was dropped inside a finalizer: the run stops now", name)
        if _pending == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(_pending)


def taken() -> None:
    """The command's handler has taken the stop: nothing is pending any
    more, and another Ctrl-C or SIGTERM, until the process exits, is
    ignored instead of cutting the exit short with a traceback (the stop's
    message unprinted, its clean-up half done; the exit's waits are
    bounded: the write gate's reaper, a lease given back). Only the main
    thread may change handlers: elsewhere only the pending stop is cleared."""
    global _pending
    _pending = None
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
