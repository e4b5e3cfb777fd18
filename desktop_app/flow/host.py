"""What a run driver needs from the engine that hosts it, and nothing more.

:class:`~desktop_app.flow.engine.Engine` implements :class:`DriverHost`; the
driver depends on this protocol only, so ``driver`` never imports ``engine``.
"""

from __future__ import annotations

import threading
from collections.abc import Container
from typing import Protocol

from desktop_app.flow.clock import Clock
from desktop_app.flow.events import EventBus
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import CheckpointStore, Lease


class DriverHost(Protocol):
    """The engine as a run driver sees it.

    Attributes:
        store: where the run's checkpoints are appended.
        clock: the source of time (UTC epoch seconds).
        events: the bus step and run events are published on.
        owner: this process's lease owner id.
        shutdown_event: set when the engine stops; drivers stop before the next step.
        lost: ids of runs whose lease another process took over.
        executes: False for an engine that only hands runs to workers
            (``Engine(executes=False)``).
        check_state: compare, after each step, every state field the step
            did not replace with its stored encoding
            (``Engine(check_state=True)``).
    """

    @property
    def store(self) -> CheckpointStore: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def events(self) -> EventBus: ...

    @property
    def owner(self) -> str: ...

    @property
    def shutdown_event(self) -> threading.Event: ...

    @property
    def lost(self) -> Container[str]: ...

    @property
    def executes(self) -> bool: ...

    @property
    def check_state(self) -> bool: ...

    def lease(
        self, takes_over: str | None = None, dead: bool = False, now: float | None = None
    ) -> Lease:
        """A lease for this process from now; ``takes_over`` names the holder
        it takes the run from (a compare-and-set), ``dead`` when that holder's
        process is known to have exited; ``now``: a reading of :attr:`clock`
        just taken (UTC epoch seconds), else the clock is read."""

    def commit(self, request: AppendRequest) -> None:
        """Append one checkpoint; returns once it is durable (its batch
        committed). Raises the errors of ``CheckpointStore.append``."""

    def track(self, run_id: str, executing: bool) -> None:
        """Note that the host starts (``True``) or stops executing ``run_id``."""

    def cancel_event(self, run_id: str) -> threading.Event:
        """The in-memory flag set when ``run_id`` is canceled in this process."""

    def forget_cancel(self, run_id: str) -> None:
        """Drop the run's cancel flag once nothing drives it."""
