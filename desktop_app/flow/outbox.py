"""Delivering outbox intents after their checkpoint committed.

A step queues a side effect with ``ctx.send(destination, payload)``; the
intent commits in the step's own transaction, so it exists exactly when the
step's result does. :class:`Dispatcher` then delivers it:

1. mark the intent ``sending`` (committed, attempts + 1) if its status is
   still the one listed: of two dispatchers only one claims it,
2. call ``destination.send(idempotency_key, payload)``,
3. mark it ``delivered`` with the destination's receipt.

A crash between 2 and 3 leaves the intent ``sending``. The next dispatcher
does not send it again blindly: it *reconciles*, asking the destination
``lookup(idempotency_key)``; if the destination has it, the intent is marked
delivered, otherwise it is sent (with the same key, which the destination can
de-duplicate). Errors are classified by type: an exception whose
``retryable`` attribute is false marks the intent ``failed``; anything else
leaves it ``pending`` for the next pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from desktop_app.errors import FlowdeskError
from desktop_app.flow.clock import Clock, SystemClock
from desktop_app.store.protocol import CheckpointStore, Intent


class Destination(Protocol):
    """Where intents go (an HTTP API, a mailer, a file system...)."""

    def send(self, idempotency_key: str, payload: Any) -> Any:
        """Perform the effect; returns a JSON receipt. Must accept a repeated key."""

    def lookup(self, idempotency_key: str) -> Any | None:
        """The receipt of an effect already performed with this key, or ``None``."""


class UnknownDestinationError(FlowdeskError):
    """An intent names a destination no dispatcher knows."""

    retryable = False


class Dispatcher:
    """Delivers pending intents and reconciles interrupted ones.

    Args:
        store: the checkpoint store holding the outbox.
        destinations: destination name -> :class:`Destination`.
        clock: time source (UTC epoch seconds).
    """

    def __init__(
        self,
        store: CheckpointStore,
        destinations: Mapping[str, Destination],
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.destinations = dict(destinations)
        self.clock = clock if clock is not None else SystemClock()

    def dispatch(self, limit: int = 100) -> int:
        """One pass: reconcile ``sending`` intents, then deliver ``pending`` ones.
        Returns how many were delivered."""
        delivered = 0
        for intent in self.store.intents(["sending"], limit):
            delivered += self._deliver(intent, reconcile=True)
        for intent in self.store.intents(["pending"], limit):
            delivered += self._deliver(intent, reconcile=False)
        return delivered

    def _deliver(self, intent: Intent, *, reconcile: bool) -> int:
        dest = self.destinations.get(intent.destination)
        now = self.clock.now
        if dest is None:
            self.store.mark_intent(
                intent.intent_id,
                "failed",
                now(),
                error=f"unknown destination {intent.destination!r}",
            )
            return 0
        try:
            if reconcile:
                receipt = dest.lookup(intent.intent_id)
                if receipt is not None:  # it was delivered before the crash
                    self.store.mark_intent(intent.intent_id, "delivered", now(), receipt=receipt)
                    return 1
            if not self.store.mark_intent(intent.intent_id, "sending", now(), expect=intent.status):
                return 0  # another dispatcher claimed it since we listed it
            receipt = dest.send(intent.intent_id, intent.payload)
        except Exception as exc:
            status = "failed" if getattr(exc, "retryable", True) is False else "pending"
            self.store.mark_intent(
                intent.intent_id, status, now(), error=f"{type(exc).__name__}: {exc}"
            )
            return 0
        self.store.mark_intent(intent.intent_id, "delivered", now(), receipt=receipt)
        return 1
