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

from collections.abc import Callable

from desktop_app.app.pump import Pump


class TimerPump(Pump):
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
        super().__init__(
            "app timers",
            "Timers and deadlines are not fired for now",
            every_s=every_s,
            on_error=on_error,
        )
        self._due = due
        self._next_deadline = next_deadline
        self._now = now
        self._fire = fire
        self._skip = skip
        self._before = before_first
        #: runs handed to ``fire`` (for tests and the log)
        self.fired = 0

    def _before_first(self) -> None:
        self._before()

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
