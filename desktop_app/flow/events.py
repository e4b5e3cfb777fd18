"""A small synchronous event bus: the engine publishes, the UI and tracing listen.

Subscribers are called in the engine's thread, in subscription order; an
exception in a subscriber is logged and never breaks the run. A Textual app
subscribes with a callback that forwards through ``App.call_from_thread``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepResult:
    """The result record of one step execution (Agentium's StepResult).

    ``status`` is ``done``, ``error`` or ``skipped``; ``duration_ms`` is wall
    time. ``error`` is the step's error as the run records it (``"ValueError:
    <its message>"``, which may hold state values); ``error_type`` only the
    exception's class name (``"ValueError"``), for spans and metrics.
    """

    name: str
    status: Literal["done", "error", "skipped"]
    error: str | None
    duration_ms: float
    error_type: str | None = None


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    flow_name: str


@dataclass(frozen=True, slots=True)
class StepStarted:
    run_id: str
    step_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class StepFinished:
    run_id: str
    result: StepResult


@dataclass(frozen=True, slots=True)
class RunProgress:
    run_id: str
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class RunFinished:
    run_id: str
    status: str
    error: str | None


Event = RunStarted | StepStarted | StepFinished | RunProgress | RunFinished
Subscriber = Callable[[Event], None]


class EventBus:
    """Publish engine events to subscribers (thread-safe)."""

    def __init__(self) -> None:
        self._subs: list[Subscriber] = []
        self._lock = threading.Lock()
        #: whether anyone subscribes: a publisher may skip making an event
        #: nobody would receive (an attribute, set under the lock when a
        #: subscriber comes or goes, read without it: a subscriber added
        #: meanwhile gets the events published after it was added; read
        #: twice at every step, where a property's call showed)
        self.listening = False

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Add ``fn``; returns a function that removes it."""
        with self._lock:
            self._subs.append(fn)
            self.listening = True

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subs:
                    self._subs.remove(fn)
                self.listening = bool(self._subs)

        return unsubscribe

    def publish(self, event: Event) -> None:
        with self._lock:
            subs = list(self._subs)
        for fn in subs:
            try:
                fn(event)
            except Exception:  # a broken listener must not break a run
                log.exception("event subscriber %r failed on %r", fn, type(event).__name__)
