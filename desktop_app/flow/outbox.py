"""Delivering outbox intents after their checkpoint committed.

A step queues a side effect with ``ctx.send(destination, payload)``; the
intent commits in the step's own transaction, so it exists exactly when the
step's result does. :class:`Dispatcher` then delivers it:

1. claim it (``store.claim_intents``: this dispatcher's for ``claim_ttl_s``
   seconds), mark it ``sending`` (committed, attempts + 1) if its status is
   still the one claimed,
2. call ``destination.send(idempotency_key, payload)``,
3. mark it ``delivered`` with the destination's receipt.

Two dispatchers (two processes, two machines) never get the same intent: a
claimed intent is handed to nobody else while its claimant is alive on this
host (:func:`claimant_is_alive`, whatever the clocks say: the rule of run
leases), nor, for a claimant on another host, until its claim expires (the
claim of the intent being sent is renewed every third of ``claim_ttl_s``);
it is taken over at once when its claimant is gone
(:func:`claimant_is_gone`: its process on this host exited, or its
dispatcher object in this process was dropped). A crash between 2 and 3
leaves the intent ``sending`` with a dead claim: it may have been made. The
next dispatcher does not send it again blindly: it *reconciles*, asking the
destination ``lookup(idempotency_key)``; if the destination has it, the
intent is marked delivered, otherwise it is sent (with the same key, which
the destination can de-duplicate). A lookup that raises leaves it
``sending`` (outcome unknown, the error recorded, the claim let go): the next
dispatcher looks it up again, never sends it blindly. Errors of a send are
classified by type: an exception whose ``retryable`` attribute is false
marks the intent ``failed``; anything else (a timeout, a reset connection:
the destination may have made the effect and then failed to answer) leaves
its outcome unknown: it stays ``sending`` with the error
(:data:`SEND_FAILED`), its claim let go, and the next pass reconciles it as
an interrupted send, looking it up before sending it again. A destination
with no ``lookup`` method cannot be asked: an interrupted intent of its is
sent again with the same idempotency key, which it must de-duplicate (the
intent's error and a warning say so, :func:`resent_unchecked`).

A send or a lookup that raises a :class:`~desktop_app.errors.StoreError`
(a full disk, a locked database: the outcome of what it did cannot be
recorded) ends the pass once that intent is let go as above: the error is
raised from :meth:`Dispatcher.dispatch`, and no further intent of the pass
is sent. A full disk thus stops delivery at the first write that fails,
leaving at most one intent whose send began and whose end was not recorded,
instead of making more effects whose outcome may fail to be recorded too.

An intent can be withdrawn before delivery (``store.withdraw_intents``: a
tidy undo takes back the moves not made yet, and ``Engine.cancel`` takes back
every intent of the canceled run not delivered yet, also of a run that had
ended before the cancel with intents still queued, see
:func:`withdraw_for_cancel`). Every mark the dispatcher
makes is compared and set on the status it last read, so a withdrawn intent
is never sent, nor set back to ``pending`` or ``delivered``, by a
dispatcher that claimed it a moment before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from desktop_app.errors import CheckpointNotFoundError, DiskFullError, FlowdeskError, StoreError
from desktop_app.flow.clock import Clock, SystemClock
from desktop_app.flow.owners import new_owner, owner_is_alive, owner_is_dead
from desktop_app.store.protocol import CheckpointStore, Intent, Withdrawal

if TYPE_CHECKING:
    from desktop_app.flow.definition import CompiledFlow

log = logging.getLogger(__name__)


@runtime_checkable
class Destination(Protocol):
    """Where intents go (an HTTP API, a mailer, a file system...): any
    object with ``send``. One that can also say what it made is a
    :class:`LookupDestination`; one that cannot has an interrupted send
    repeated with the same idempotency key (:func:`resent_unchecked`)."""

    def send(self, idempotency_key: str, payload: Any) -> Any:
        """Perform the effect; returns a JSON receipt. Must accept a repeated key."""


@runtime_checkable
class LookupDestination(Destination, Protocol):
    """A :class:`Destination` that can be asked whether an effect was made:
    a send of unknown outcome (its process killed mid-send, a timeout) is
    looked up before it is sent again, and a cancel or an undo settles one
    withdrawn mid-send with it (:func:`register_lookup`)."""

    def lookup(self, idempotency_key: str) -> Any | None:
        """The receipt of an effect already performed with this key, or
        ``None`` when it was not performed."""


def lookup_of(destination: Destination) -> Callable[[str], Any] | None:
    """``destination``'s ``lookup`` method, or ``None`` when it has none
    (a send-only :class:`Destination`): the one test of "can it be asked"
    the dispatcher and :func:`settle_withdrawn` both use."""
    lookup = getattr(destination, "lookup", None)
    return lookup if callable(lookup) else None


class UnknownDestinationError(FlowdeskError):
    """An intent names a destination no dispatcher knows."""

    retryable = False


#: owner id -> live Dispatcher of this process (a dropped dispatcher's claims are dead)
_LIVE: weakref.WeakValueDictionary[str, Dispatcher] = weakref.WeakValueDictionary()


def claimant_is_gone(owner: str) -> bool:
    """True when the dispatcher ``owner`` (``host:pid:nonce``) can no longer
    send: its process on this host is gone, or it is this process and no
    live :class:`Dispatcher` has that owner any more. Other hosts' claimants
    are never presumed gone (their claims expire)."""
    if owner_is_dead(owner):
        return True
    mine = f"{socket.gethostname()}:{os.getpid()}:"
    return owner.startswith(mine) and owner not in _LIVE


def claimant_is_alive(owner: str) -> bool:
    """True when the dispatcher ``owner`` can still be sending: its process
    on this host runs (:func:`~desktop_app.flow.owners.owner_is_alive`) and,
    when it is this process, a live :class:`Dispatcher` has that owner. Its
    claim is never taken over, however late its clock or slow its send (the
    rule of run leases). Other hosts' claimants are never presumed alive
    (their claims expire unless renewed)."""
    return owner_is_alive(owner) and not claimant_is_gone(owner)


#: the error an intent withdrawn by a cancel records (``flowdesk outbox`` shows it)
CANCELED = "withdrawn: the run was canceled before this was delivered"

#: the ended run statuses whose side effects still queued a cancel withdraws
#: (``Engine.withdraw_after_end``; a ``canceled`` run's own cancel withdrew its)
WITHDRAWN_AFTER_END: tuple[str, ...] = ("completed", "timed_out")

#: the error an intent records that ``cancel`` withdrew after its run had
#: ended (one of :data:`WITHDRAWN_AFTER_END`) with it still queued
CANCELED_AFTER_END = (
    "withdrawn: `cancel` took it back after the run ended, before this was delivered"
)

#: the error a withdrawn intent records when its send had begun and no
#: destination here could say whether it was made
OUTCOME_UNKNOWN = (
    "withdrawn mid-send: whether it was made was never recorded (the process sending "
    "it stopped, or its send failed midway), and no destination here can check; its "
    "outcome is unknown"
)

#: the start of the error an interrupted intent records when its
#: destination's lookup failed: it stays ``sending``, its outcome unknown
LOOKUP_FAILED = "outcome unknown: the lookup of this interrupted send failed"

#: the start of the error an intent records when its send raised a retryable
#: error (a timeout, a reset connection): the destination may have made it
#: before the call failed, so it stays ``sending``, its outcome unknown, and
#: is looked up before it is sent again
SEND_FAILED = "outcome unknown: the send failed midway and may have been made"


def resent_unchecked(destination: str) -> str:
    """What is said of an intent to ``destination`` (one with no ``lookup``)
    whose outcome is unknown: it is sent again with the same idempotency
    key, so it is made once only if the destination de-duplicates that key."""
    return (
        f"{destination!r} has no lookup, so it is sent again with the same idempotency "
        f"key: it is made once only if {destination!r} ignores a repeated key"
    )


#: destination name -> ``factory(store)``: the destination whose ``lookup``
#: settles that destination's intents withdrawn mid-send
_LOOKUPS: dict[str, Callable[[CheckpointStore], LookupDestination]] = {}


def register_lookup(
    destination: str, factory: Callable[[CheckpointStore], LookupDestination]
) -> None:
    """Let :func:`settle_withdrawn` ask ``factory(store).lookup(key)`` whether
    an intent to ``destination`` withdrawn mid-send was made (the built-in
    tidy flow registers its file mover; a program registers its own
    destinations). A second registration for the same name replaces the first."""
    _LOOKUPS[destination] = factory


def settle_withdrawn(
    store: CheckpointStore,
    done: Withdrawal,
    clock: Clock | None = None,
    destinations: Mapping[str, Destination] | None = None,
) -> Withdrawal:
    """Say the truth about intents ``done`` withdrew while they were
    ``sending``: their dispatcher stopped (its process died) after the send
    began, or the send failed midway (:data:`SEND_FAILED`), so the effect
    may have been made although it was never marked.

    Each is asked of its destination (``destinations``, else one
    :func:`register_lookup` made), as a dispatcher reconciles an interrupted
    intent: a receipt means it was made, and the intent is marked
    ``delivered`` with it (``made``); ``None`` means it was not (it stays in
    ``withdrawn``). With no destination here that has a ``lookup`` (a
    :class:`LookupDestination`), or a lookup that raises, it stays
    ``failed`` with :data:`OUTCOME_UNKNOWN` as its error (``unknown``).
    ``pending`` intents were never sent: they stay in ``withdrawn``.

    Returns:
        Withdrawal: ``done`` with those intents moved to ``made``/``unknown``.

    Raises:
        StoreError: the store could not be written.
    """
    now = (clock or SystemClock()).now
    withdrawn: list[Intent] = []
    made, unknown = list(done.made), list(done.unknown)
    for intent in done.withdrawn:
        if intent.status != "sending":
            withdrawn.append(intent)
            continue
        given = (destinations or {}).get(intent.destination)
        lookup = None if given is None else lookup_of(given)
        factory = _LOOKUPS.get(intent.destination)
        if lookup is None and factory is not None:
            lookup = lookup_of(factory(store))
        receipt = None
        if lookup is not None:
            try:
                receipt = lookup(intent.intent_id)
            except Exception as exc:  # any failure leaves it unknown
                log.warning("intent %s: lookup failed: %s", intent.intent_id, exc)
                lookup = None
        if lookup is None:
            store.mark_intent(
                intent.intent_id, "failed", now(), error=OUTCOME_UNKNOWN, expect="failed"
            )
            unknown.append(intent)
        elif receipt is not None:
            store.mark_intent(
                intent.intent_id, "delivered", now(), receipt=receipt, expect="failed"
            )
            made.append(intent)
        else:
            withdrawn.append(intent)
    return Withdrawal(withdrawn, done.in_flight, made, unknown)


def withdraw_for_cancel(
    store: CheckpointStore,
    run_id: str,
    flow: CompiledFlow[Any] | None,
    reason: str = CANCELED,
) -> Withdrawal:
    """Withdraw canceled run ``run_id``'s intents not delivered yet
    (``store.withdraw_intents`` with ``reason``: :data:`CANCELED`, or
    :data:`CANCELED_AFTER_END` for a run that had ended before the cancel): each ``pending`` one,
    and each ``sending`` one whose claimant is gone (:func:`claimant_is_gone`)
    or whose claim expired. One a live dispatcher is sending is left to it
    (its outcome is recorded as it ends) and returned in ``in_flight``. A
    ``sending`` one withdrawn is settled by :func:`settle_withdrawn` (made,
    not made, or said unknown). Then ``flow``'s
    :attr:`~desktop_app.flow.definition.CompiledFlow.on_cancel` hook, if it
    has one, records it (``flow`` is the run's flow; ``None``: the canceling
    engine has no flow of the run's name, so no hook runs).

    Raises:
        StoreError: the store could not be written.
    """
    done = store.withdraw_intents(
        run_id, reason, presumed_dead=claimant_is_gone, presumed_alive=claimant_is_alive
    )
    return settle_cancel(store, run_id, flow, done)


def settle_cancel(
    store: CheckpointStore, run_id: str, flow: CompiledFlow[Any] | None, done: Withdrawal
) -> Withdrawal:
    """What :func:`withdraw_for_cancel` does once ``store`` withdrew canceled
    run ``run_id``'s intents (``done``; ``Engine.cancel`` withdraws them in
    the transaction of the run's status change,
    ``store.update_latest_withdrawing``): the ``sending`` ones withdrawn are
    settled (:func:`settle_withdrawn`), then ``flow``'s ``on_cancel`` hook,
    if it has one, records the cancel. Returns ``done`` as settled.

    Raises:
        StoreError: the store could not be written.
    """
    done = settle_withdrawn(store, done)
    hook = None if flow is None else flow.on_cancel
    if hook is not None:
        hook(store, run_id, done)
    if done.withdrawn:
        log.info("run %s canceled: %d queued intents withdrawn", run_id, len(done.withdrawn))
    return done


#: outbox statuses that keep a ``delete_on_success`` run: not delivered yet
#: (``pending``, ``sending``), or given up on (``failed``: the run shows it)
KEEPS_THE_RUN = ("pending", "sending", "failed")


def delete_when_sent(store: CheckpointStore, run_id: str) -> None:
    """Delete the completed run ``run_id`` of a ``delete_on_success`` flow
    unless one of its side effects is not delivered: its queued intents are
    claimed through the run's row (scope, lease, a ``db copy``'s move), so
    deleting it with an intent still pending left that effect undelivered
    for ever, and hid it (a tryout). A run kept so is deleted by the next
    :meth:`~desktop_app.flow.engine.Engine.delete_delivered_runs` of an
    engine that runs its flow (its ``tick``, the app's timer pass) once its
    last intent is delivered; one with an intent given up on
    (``failed``) stays, to show it.

    Raises:
        StoreError: the store failed (the run stays, completed).
    """
    if store.intents(KEEPS_THE_RUN, 1, run_id=run_id):
        return
    with contextlib.suppress(CheckpointNotFoundError):  # another engine's tick was first
        store.delete_run(run_id)


#: what follows once a full disk that stopped a delivery pass has space again
_AGAIN = (
    "the next delivery pass (a program's next dispatch(); the app and `flowdesk agent` "
    "keep trying on their own) delivers what is still queued: a side effect whose send "
    "began is looked up at its destination first, or sent again with the same "
    "idempotency key where the destination has no lookup"
)


class Dispatcher:
    """Claims pending intents and delivers them; reconciles interrupted ones.

    Args:
        store: the checkpoint store holding the outbox.
        destinations: destination name -> :class:`Destination`.
        clock: time source (UTC epoch seconds) for delivery times; when given,
            it also decides claim expiry (a test clock), else the store's
            clock does (``store.now()``).
        owner: this dispatcher's owner id (default: a new ``host:pid:nonce``).
        claim_ttl_s: seconds a claimed intent stays this dispatcher's
            without renewal; the claim of the intent being sent is renewed
            every third of it, and a claimant alive on this host keeps its
            claims whatever the clocks say (:func:`claimant_is_alive`).
    """

    def __init__(
        self,
        store: CheckpointStore,
        destinations: Mapping[str, Destination],
        clock: Clock | None = None,
        *,
        owner: str | None = None,
        claim_ttl_s: float = 300.0,
    ) -> None:
        self.store = store
        self.destinations = dict(destinations)
        self._claim_clock = clock
        self.clock = clock if clock is not None else SystemClock()
        self.owner = owner or new_owner()
        self.claim_ttl_s = claim_ttl_s
        #: the intent this dispatcher is sending now (its claim is renewed)
        self._sending: str | None = None
        _LIVE[self.owner] = self

    def dispatch(self, limit: int = 100) -> int:
        """One pass: claim up to ``limit`` intents (interrupted ones are
        reconciled first, then sent if the destination lacks them), deliver
        them. Returns how many were delivered.

        Raises:
            StoreError: the store failed (a full disk: ``DiskFullError``); the
                pass stopped there, leaving at most the intent being sent
                ``sending`` (its outcome unknown) and the rest claimed by this
                dispatcher but not begun (``pending``: taken over at once when
                this dispatcher is gone, or when its claim expires).
        """
        now = None if self._claim_clock is None else self._claim_clock.now()
        try:
            # only what this dispatcher can deliver: an intent for a destination
            # another process registers stays pending for that process
            claimed = self.store.claim_intents(
                self.owner,
                self.claim_ttl_s,
                limit,
                presumed_dead=claimant_is_gone,
                presumed_alive=claimant_is_alive,
                now=now,
                destinations=tuple(self.destinations),
            )
            if not claimed:
                return 0
            with self._renewing():
                return sum(self._deliver(intent) for intent in claimed)
        except DiskFullError as exc:  # its words are a run's: no run stopped here
            raise exc.stopping_no_run(_AGAIN) from exc

    def _deliver(self, intent: Intent) -> int:
        # every mark is compared and set on the status this dispatcher last
        # saw: an intent withdrawn meanwhile (``withdraw_intents``, e.g. by an
        # undo) is neither sent nor set back to pending or delivered
        dest = self.destinations[intent.destination]  # claimed for one of them only
        now = self.clock.now
        expected: str = intent.status
        lookup = lookup_of(dest)
        if intent.interrupted and lookup is not None:
            # its send began and its end was never recorded: it may have been
            # made, so it is asked of the destination, never sent blindly
            try:
                receipt = lookup(intent.intent_id)
            except Exception as exc:
                # still unknown: it stays `sending` (interrupted) with the
                # reason, let go so the next dispatcher looks it up again
                log.warning("intent %s: lookup failed: %s", intent.intent_id, exc)
                self.store.release_intent(
                    intent.intent_id, self.owner, f"{LOOKUP_FAILED}: {type(exc).__name__}: {exc}"
                )
                if isinstance(exc, StoreError):
                    raise  # the store cannot record outcomes now: the pass ends here
                return 0
            if receipt is not None:  # it was delivered before the crash
                return int(
                    self.store.mark_intent(
                        intent.intent_id, "delivered", now(), receipt=receipt, expect=expected
                    )
                )
        elif intent.interrupted:
            # it may have been made and this destination cannot be asked: sent
            # again with the same key, made once only if the destination
            # de-duplicates it (its last error, as the Outbox tab shows it, says so)
            log.warning("intent %s: %s", intent.intent_id, resent_unchecked(intent.destination))
        try:
            if not self.store.mark_intent(intent.intent_id, "sending", now(), expect=expected):
                return 0  # claimed by another dispatcher since (its claim expired), or withdrawn
            expected = "sending"
            self._sending = intent.intent_id  # its claim is renewed while it is sent
            try:
                receipt = dest.send(intent.intent_id, intent.payload)
            finally:
                self._sending = None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            if getattr(exc, "retryable", True) is not False and expected == "sending":
                # the send began and failed in a way that may come after the
                # effect (a timeout, a reset: the server may have made it and
                # died): its outcome is unknown. It stays `sending`, let go,
                # so the next dispatcher looks it up before sending it again
                unknown = f"{SEND_FAILED}: {error}"
                if lookup is None:
                    unknown += f"; {resent_unchecked(intent.destination)}"
                self.store.release_intent(intent.intent_id, self.owner, unknown)
            else:
                status = "failed" if getattr(exc, "retryable", True) is False else "pending"
                self.store.mark_intent(
                    intent.intent_id, status, now(), error=error, expect=expected
                )
            if isinstance(exc, StoreError):
                # the store cannot record outcomes now (a full disk, a locked
                # database): sending the next intent would make an effect whose
                # outcome may go unrecorded too, so the pass ends here
                raise
            return 0
        # sent: counted even when the mark loses (a peer that took over a claim
        # that expired mid-send marked it first)
        self.store.mark_intent(
            intent.intent_id, "delivered", now(), receipt=receipt, expect=expected
        )
        return 1

    @contextlib.contextmanager
    def _renewing(self) -> Iterator[None]:
        """While the block (a pass) runs, renew this dispatcher's claim on
        the intent it is sending (``self._sending``) every third of
        ``claim_ttl_s``, so that a slow send is never taken over by a
        dispatcher that cannot see this process alive (another host, or a
        store without a process to check). A renewal that fails is logged and
        tried again at the next tick."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.claim_ttl_s / 3):
                intent_id = self._sending
                if intent_id is None:
                    continue
                now = None if self._claim_clock is None else self._claim_clock.now()
                try:
                    if not self.store.renew_intent_claim(
                        intent_id, self.owner, self.claim_ttl_s, now=now
                    ):
                        log.warning("intent %s: claim lost while sending", intent_id)
                except Exception as exc:  # the store is unreachable for now
                    log.warning("intent %s: claim not renewed: %s", intent_id, exc)

        renewer = threading.Thread(target=renew, name="outbox-claim-renewal", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()
