"""In-app timers: while open on a database it executes runs on (SQLite), the
app fires due timers and deadlines and delivers arrived signals and events,
as ``flowdesk agent`` does (``Engine.tick`` in ``Engine.serve``).

:class:`TimerPump` looks on its own thread, at least every ``every_s``
seconds and at the earliest pending deadline, for waiting runs that have
something to act on (``CheckpointStore.wakeable_runs``) and hands each one
to ``fire(run_id)``; the app claims the run (at most one driver per run id
here) and wakes it on a worker (``Engine.wake``). The run's lease still
decides between processes: a run another process (``flowdesk agent``, a
second app) is waking is refused there with ``RunLeasedError`` and left to
it. No Textual here: the app hands it callbacks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from desktop_app.errors import FlowdeskError


class TimerPump:
    """Fires due timers and deadlines on a background thread while the app is open.

    Args:
        due: the ids of waiting runs with something to act on now (a passed
            deadline, a deliverable signal or event); may raise
            ``FlowdeskError`` (the pass is tried again ``every_s`` later).
        next_deadline: the earliest pending deadline (UTC epoch seconds), or
            ``None``.
        now: the engine's clock (UTC epoch seconds).
        fire: called on the pump's thread with each due run id not skipped;
            returns ``True`` if it took the run (``False``: it is being
            driven here already).
        skip: ids of runs not to hand over again (refused before); read on
            every pass.
        every_s: longest pause between two passes (seconds).
        before_first: called once on the pump's thread before the first
            pass (the app waits there for launch recovery to list its runs).
        on_error: called on the pump's thread with the text of a pass that
            raised (once per distinct text; the pump keeps going).
    """

    def __init__(
        self,
        *,
        due: Callable[[], list[str]],
        next_deadline: Callable[[], float | None],
        now: Callable[[], float],
        fire: Callable[[str], bool],
        skip: Callable[[], set[str]],
        every_s: float,
        before_first: Callable[[], object] = lambda: None,
        on_error: Callable[[str], object] = lambda _text: None,
    ) -> None:
        self._due = due
        self._next_deadline = next_deadline
        self._now = now
        self._fire = fire
        self._skip = skip
        self.every_s = every_s
        self._before_first = before_first
        self._on_error = on_error
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: passes done and runs handed to ``fire`` (for tests and the log)
        self.passes = 0
        self.fired = 0

    def start(self) -> None:
        """Start the thread (once); the first pass runs at once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="app timers", daemon=True)
            self._wake.set()
            self._thread.start()

    def wake(self) -> None:
        """Look again as soon as the current pass (if any) ends (thread-safe):
        a run of this app began a wait, whose deadline may be sooner."""
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop after the current pass; waits up to ``timeout_s`` seconds for it."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _pass(self) -> float:
        """Hand every due run to ``fire``; returns the seconds to wait."""
        skip = self._skip()
        for run_id in self._due():
            if self._stop.is_set():
                break
            if run_id not in skip and self._fire(run_id):
                self.fired += 1
        wait = self.every_s
        nxt = self._next_deadline()
        now = self._now()
        # a deadline still due after the pass is one this app may not fire
        # (refused, leased elsewhere, being fired): the next poll, not a spin
        if nxt is not None and nxt > now:
            wait = min(wait, nxt - now)
        return wait

    def _loop(self) -> None:
        self._before_first()
        last_error: str | None = None
        wait = 0.0
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
            except Exception as exc:  # a closed store at shutdown...
                error = f"{type(exc).__name__}: {exc}"
                wait = self.every_s
            else:
                error = None
            self.passes += 1
            if error is not None and error != last_error and not self._stop.is_set():
                self._on_error(f"Timers and deadlines are not fired for now: {error}")
            last_error = error
