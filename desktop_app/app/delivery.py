"""In-app outbox delivery: the app runs the same dispatcher as ``flowdesk agent``.

:class:`OutboxPump` calls a dispatch function on its own thread whenever it is
woken (a run of this app saved a checkpoint or finished, so it may have queued
intents) and at least every ``every_s`` seconds (intents queued by another
process, or retried after a failed delivery). No Textual here: the app hands
it callbacks that post messages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from desktop_app.errors import FlowdeskError


class OutboxPump:
    """Delivers outbox intents on a background thread while the app is open.

    Args:
        dispatch: one delivery pass; returns how many intents were delivered
            (:meth:`desktop_app.flow.outbox.Dispatcher.dispatch`).
        every_s: longest pause between two passes (seconds).
        on_delivered: called on the pump's thread with the count of a pass
            that delivered something.
        on_error: called on the pump's thread with the text of a pass that
            raised (the pump keeps going; the intents stay queued).
    """

    def __init__(
        self,
        dispatch: Callable[[], int],
        *,
        every_s: float,
        on_delivered: Callable[[int], object],
        on_error: Callable[[str], object],
    ) -> None:
        self._dispatch = dispatch
        self.every_s = every_s
        self._on_delivered = on_delivered
        self._on_error = on_error
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.delivered = 0

    def start(self) -> None:
        """Start the thread (once); the first pass runs at once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="outbox delivery", daemon=True)
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

    def _loop(self) -> None:
        last_error: str | None = None
        while not self._stop.is_set():
            self._wake.wait(self.every_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                count = self._dispatch()
            except FlowdeskError as exc:
                error: str | None = str(exc)
                count = 0
            except Exception as exc:  # a closed store at shutdown, a bad destination...
                error = f"{type(exc).__name__}: {exc}"
                count = 0
            else:
                error = None
            self.passes += 1
            if error is not None and error != last_error and not self._stop.is_set():
                self._on_error(f"Outbox delivery stopped for now: {error}")
            last_error = error
            if count:
                self.delivered += count
                self._on_delivered(count)
