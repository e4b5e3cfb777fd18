"""A background thread of the app that runs a pass whenever it is woken and
at least every ``every_s`` seconds: the base of the app's outbox delivery
(:class:`~desktop_app.app.delivery.OutboxPump`) and its timers
(:class:`~desktop_app.app.timers.TimerPump`). No Textual here: the app hands
it callbacks that post messages.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from desktop_app.errors import FlowdeskError


class Pump(ABC):
    """Runs :meth:`_pass` on its own thread: at once when started, then
    whenever woken and at least every ``every_s`` seconds (or sooner, as the
    pass says). A pass that raises is said once per distinct text (prefixed
    ``what``) through ``on_error``; the pump keeps going.

    Args:
        name: the thread's name.
        what: what stops when a pass fails (``"Outbox delivery stopped for
            now"``), the start of the error's text.
        every_s: longest pause between two passes (seconds).
        on_error: called on the pump's thread with the text of a pass that
            raised.
    """

    def __init__(
        self, name: str, what: str, *, every_s: float, on_error: Callable[[str], object]
    ) -> None:
        self.name = name
        self.what = what
        self.every_s = every_s
        self._on_error = on_error
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: passes done (for tests and the log)
        self.passes = 0

    def start(self) -> None:
        """Start the thread (once); the first pass runs at once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._wake.set()
            self._thread.start()

    def wake(self) -> None:
        """Run a pass as soon as the current one (if any) ends (thread-safe)."""
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop after the current pass; waits up to ``timeout_s`` seconds for it."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _before_first(self) -> None:
        """Called once on the pump's thread before the first pass (none here)."""
        return None

    @abstractmethod
    def _pass(self) -> float:
        """One pass; returns the seconds to wait before the next (at most
        ``every_s``) unless woken sooner."""

    def _loop(self) -> None:
        self._before_first()
        last_error: str | None = None
        wait = self.every_s
        while not self._stop.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                wait = self._pass()
            except FlowdeskError as exc:
                error: str | None = str(exc)
                wait = self.every_s
            except Exception as exc:  # a closed store at shutdown, a bad destination...
                error = f"{type(exc).__name__}: {exc}"
                wait = self.every_s
            else:
                error = None
            self.passes += 1
            if error is not None and error != last_error and not self._stop.is_set():
                self._on_error(f"{self.what}: {error}")
            last_error = error
