"""The four wait kinds, as a registry: how a wait of each kind begins, what
it polls for while the run waits, and what its deadline does.

* ``input``: an await step's question to a person; nothing to poll (the
  answer comes through ``Engine.resume_with``); its deadline times it out.
* ``signal``: the first unconsumed signal sent to ``(name, key)`` (a durable
  mailbox, as Temporal's signals); consumed in the checkpoint that completes
  the step; its deadline times it out.
* ``event``: the first event of type ``name`` published after the wait began
  (a broadcast: never consumed; a wait that refused one looks on from just
  after it; a wait that failed on what it received looks again from its own
  start); its deadline times it out.
* ``timer``: nothing arrives; its deadline is the point (a durable sleep)
  and completes the step.

The driver looks a step's kind up with :func:`wait_kind_of` instead of
testing kind strings. This module imports neither the driver nor the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from desktop_app.errors import WaitKeyError
from desktop_app.flow.definition import AwaitStep, WaitStep
from desktop_app.flow.run import RunMeta
from desktop_app.store.protocol import Mailbox, Wait


@dataclass(frozen=True, slots=True)
class Arrival:
    """What a poll found: the payload that completes the step, the
    ``(signal_id, wait_id)`` pairs to consume with that checkpoint, and when
    it was sent (``sent_at`` of a signal, ``published_at`` of an event: UTC
    epoch seconds by the sender's clock), which decides whether it came
    within the wait's deadline; ``ref`` is the signal's or event's id."""

    payload: Any
    consume: list[tuple[int, str]] | None = None
    at: float | None = None
    ref: int | None = None


#: seconds past a refused event its wait looks on from: one microsecond, the
#: finest time PostgreSQL keeps (SQLite keeps more), so the refused event is
#: not met again, nor another of its type published in that microsecond
EVENT_LOOKS_ON_AFTER_S = 1e-6


class WaitKind:
    """One kind of wait. Subclasses set :attr:`name` and override what differs."""

    #: the ``Wait.kind`` stored for this kind
    name: str = ""
    #: at the deadline the step completes (a timer) instead of timing out
    completes_at_deadline: bool = False
    #: a wait that failed on what it received looks again from its own start
    #: (``meta["event_since"]``), so the next wait receives the same thing
    looks_again_from_start: bool = False
    #: what a wait of this kind receives, in words (``"signal"``): the field
    #: of a ``meta["refused_<noun>s"]`` entry naming the refused one's id
    noun: str = ""

    def begin(
        self, step: AwaitStep | WaitStep, run_id: str, state: Any, meta: RunMeta, now: float
    ) -> Wait:
        """The step's next wait, numbered ``"<run_id>:<step_id>:<n>"`` by
        ``meta["wait_seq"]`` (the caller advances it once the wait began).

        Raises:
            WaitKeyError: a signal wait's key is not a non-empty string.
            Exception: whatever the step's key function raises.
        """
        assert isinstance(step, WaitStep)
        n = int(meta.get("wait_seq", {}).get(step.id, 0))
        deadline = now + step.timeout_s if step.timeout_s else None
        key = step.key(state) if callable(step.key) else step.key
        self.check_key(step, run_id, key)
        return Wait(
            f"{run_id}:{step.id}:{n}",
            step.id,
            step.wait_kind,
            self.created_at(step, meta, now),
            name=step.name,
            key=key,
            deadline_at=deadline,
        )

    def check_key(self, step: WaitStep, run_id: str, key: Any) -> None:
        """Refuse a key this kind cannot wait on (only signals need one)."""

    def created_at(self, step: WaitStep, meta: RunMeta, now: float) -> float:
        """When the wait counts as begun (``now``, unless the kind looks back)."""
        return now

    def poll(self, store: Mailbox, wait: Wait) -> Arrival | None:
        """What arrived for ``wait``, or ``None`` (keep waiting)."""
        return None

    def after_refusal(self, wait: Wait, arrived: Arrival) -> Wait:
        """The wait that goes on waiting once ``wait`` refused ``arrived``
        (its payload did not fit): ``wait`` itself, unless the kind must
        look past what it refused (an event is never consumed)."""
        return wait


class InputKind(WaitKind):
    name = "input"

    def begin(
        self, step: AwaitStep | WaitStep, run_id: str, state: Any, meta: RunMeta, now: float
    ) -> Wait:
        assert isinstance(step, AwaitStep)
        n = int(meta.get("wait_seq", {}).get(step.id, 0))
        deadline = now + step.timeout_s if step.timeout_s else None
        return Wait(
            f"{run_id}:{step.id}:{n}",
            step.id,
            "input",
            now,
            prompt=step.prompt,
            deadline_at=deadline,
        )


class SignalKind(WaitKind):
    name = "signal"
    noun = "signal"

    def check_key(self, step: WaitStep, run_id: str, key: Any) -> None:
        if not (isinstance(key, str) and key):
            raise WaitKeyError(
                f"run {run_id}: the signal key of wait step {step.id!r} is {key!r}; "
                "it must be a non-empty string (fix the flow's key function)"
            )

    def poll(self, store: Mailbox, wait: Wait) -> Arrival | None:
        assert wait.name is not None and wait.key is not None
        signal = store.next_signal(wait.name, wait.key)
        if signal is None:
            return None
        return Arrival(
            signal.payload, [(signal.signal_id, wait.wait_id)], signal.sent_at, signal.signal_id
        )


class EventKind(WaitKind):
    name = "event"
    noun = "event"
    looks_again_from_start = True

    def created_at(self, step: WaitStep, meta: RunMeta, now: float) -> float:
        return float(meta.get("event_since", {}).get(step.id, now))

    def poll(self, store: Mailbox, wait: Wait) -> Arrival | None:
        assert wait.name is not None
        event = store.first_event(wait.name, wait.created_at)
        if event is None:
            return None
        return Arrival(event.payload, at=event.published_at, ref=event.event_id)

    def after_refusal(self, wait: Wait, arrived: Arrival) -> Wait:
        """The same wait (its id, its deadline), looking on from just after
        the refused event (:data:`EVENT_LOOKS_ON_AFTER_S`): stored so, every
        process that wakes the run, and the store's ``wakeable_runs``, skip it."""
        assert arrived.at is not None
        return replace(wait, created_at=arrived.at + EVENT_LOOKS_ON_AFTER_S)


class TimerKind(WaitKind):
    name = "timer"
    completes_at_deadline = True


#: every wait kind by ``Wait.kind``
WAIT_KINDS: dict[str, WaitKind] = {
    k.name: k for k in (InputKind(), SignalKind(), EventKind(), TimerKind())
}


def wait_kind_of(step: AwaitStep | WaitStep) -> WaitKind:
    """The kind of ``step``'s waits: ``input`` for an await step, else its ``wait_kind``."""
    return WAIT_KINDS["input" if isinstance(step, AwaitStep) else step.wait_kind]
