"""A run as the engine sees it before it drives it: the typed checkpoint
meta (:class:`RunMeta`) and the decisions a resume, an answer or a wake-up
takes on it (:class:`RunState`: refuse, which question, paused, done, may
this process take it over), made in one place from one store read
(``RunLog.head``); and the answer bookkeeping kept in the meta
(:func:`forget_answers`, :func:`remember_resolved`).

:class:`RunMeta` is the engine's bookkeeping that every checkpoint stores
whole in ``Checkpoint.meta``. Its JSON keys are the ones checkpoints have
always stored, so a stored checkpoint reads unchanged and writes back
byte-identical; it is a ``TypedDict`` (no conversion on the step path: the
driver keeps a plain dict, and the type checker holds every read and write to
these keys and their types).

This module imports neither the driver nor the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from desktop_app.errors import (
    FlowVersionMismatchError,
    RunLeasedError,
    RunStateError,
    WaitAlreadyResolvedError,
    WaitError,
)
from desktop_app.flow.owners import holding
from desktop_app.store.protocol import Checkpoint, RunLog, RunRecord, Wait


class PauseMeta(TypedDict):
    """``meta["pause"]``: the step whose last attempt failed under
    ``on_error="pause"``, and why."""

    step: str
    error: str


class RefusedSignal(TypedDict):
    """One entry of ``meta["refused_signals"]``: a signal a wait refused."""

    signal: int
    wait: str
    reason: str


class RefusedEvent(TypedDict):
    """One entry of ``meta["refused_events"]``: an event a wait refused."""

    event: int
    wait: str
    reason: str


class AwaitMeta(TypedDict):
    """``meta["await"]``: the await step waiting for input."""

    step: str
    into: str
    prompt: Any


class ChildSlot(TypedDict):
    """One child run a step started (``meta["children"][<key>][<n>]``)."""

    id: str
    kind: str


# functional syntax: "await" is a Python keyword
RunMeta = TypedDict(
    "RunMeta",
    {
        # steps run so far (``max_steps``) and why the run halted
        "steps_taken": int,
        "halt_reason": str,
        # a failed step paused for an operator
        "pause": PauseMeta,
        # the await step waiting for input
        "await": AwaitMeta,
        # earlier visits of each step id (a route back to it starts a new one)
        "visits": dict[str, int],
        # a condition's decision, by step id, for the visit in progress
        "conditions": dict[str, bool],
        # a parallel step's completed branches: step id -> branch -> output
        "branches": dict[str, dict[str, Any]],
        # child runs journaled by key (``flow.children``)
        "children": dict[str, list[ChildSlot]],
        # answers to ``ctx.interrupt`` by wait id, and the digest of the
        # prompt each answered (``context.asked_digest``)
        "answers": dict[str, Any],
        "asked": dict[str, str],
        # the only answers an interrupt takes, by wait id (its ``choices``)
        "choices": dict[str, list[str]],
        # an interrupted step's continuation, by step id
        "continuations": dict[str, Any],
        # a wait step's wait number, by step id (a new wait id each time)
        "wait_seq": dict[str, int],
        # an event wait's "published after", by step id (kept over a retry)
        "event_since": dict[str, float],
        # the last 200 wait ids answered or delivered (a second answer is refused)
        "resolved": list[str],
        # where a fork or a replay came from
        "forked_from_version": str,
        "forked_from": str,
        "replayed_from": str,
        # each resume of a stopped run: [the revision it saved, the status
        # before it] (a timeline shows the stop, counts only running time)
        "resumed": list[list[Any]],
        # the last signals a signal wait refused (its payload did not fit):
        # {"signal": id, "wait": wait id, "reason": why}, oldest first
        "refused_signals": list[RefusedSignal],
        # the last events an event wait refused (its payload did not fit; the
        # wait looks on from just after it): {"event": id, "wait": wait id,
        # "reason": why}, oldest first
        "refused_events": list[RefusedEvent],
    },
    total=False,
)


def run_meta(meta: Mapping[str, Any]) -> RunMeta:
    """A fresh, changeable copy of a checkpoint's meta, typed (the keys are
    not checked: a checkpoint's meta is the engine's own writing)."""
    return cast(RunMeta, dict(meta))


def input_waits(waits: Sequence[Wait]) -> list[Wait]:
    """The waits for a person's input (await steps and ``ctx.interrupt``)."""
    return [w for w in waits if w.kind == "input"]


def remember_resolved(meta: RunMeta, wait_id: str) -> None:
    """Note that wait ``wait_id`` ended (answered, delivered, timed out): the
    last 200 such ids are kept in ``meta["resolved"]``, so a second answer to
    one is refused."""
    resolved = [w for w in meta.get("resolved", []) if w != wait_id][-199:]
    meta["resolved"] = [*resolved, wait_id]


def forget_answers(meta: RunMeta, run_id: str, step_id: str, *, nested: bool = True) -> None:
    """Drop the answers and continuations of a step that completed: its
    own wait ids ``"<run_id>:<step_id>:<n>"`` (``<step_id>@<k>`` on a
    later visit) and, with ``nested``, those
    of the steps inside it (``"<step_id>/..."``: its branches, its nested
    steps), which completed with it. A parallel branch completes alone
    (``nested=False``): a sibling branch whose name starts with this
    one's (``"a"`` and ``"a/x"``) may still wait for its next question."""

    if not (
        meta.get("answers") or meta.get("choices") or meta.get("asked") or meta.get("continuations")
    ):
        return  # the common step: nothing asked, nothing to forget

    def own(key: str) -> bool:
        key = key.rpartition("@")[0] or key  # any visit's: "<step_id>@<k>"
        return key == step_id or (nested and key.startswith(step_id + "/"))

    prefix = f"{run_id}:"

    def kept(values: Mapping[str, object]) -> dict[str, Any]:
        return {
            k: v
            for k, v in values.items()
            if not (k.startswith(prefix) and own(k[len(prefix) :].rpartition(":")[0]))
        }

    answers = meta.get("answers")
    if answers and (left := kept(answers)) != answers:
        meta["answers"] = left
    choices = meta.get("choices")
    if choices and (rest := kept(choices)) != choices:
        meta["choices"] = rest
    asked = meta.get("asked")
    if asked and (still := kept(asked)) != asked:
        meta["asked"] = still
    conts = meta.get("continuations")
    if conts and any(own(k) for k in conts):
        meta["continuations"] = {k: v for k, v in conts.items() if not own(k)}


@dataclass(frozen=True, slots=True)
class RunState:
    """A run's row and latest checkpoint, read together, and the decisions
    the engine takes on them before it drives the run.

    Attributes:
        run: the run row.
        checkpoint: its latest checkpoint (``checkpoint.revision == run.revision``).
        meta: the checkpoint's meta, typed (the checkpoint's own mapping).
    """

    run: RunRecord
    checkpoint: Checkpoint
    meta: RunMeta

    @classmethod
    def read(cls, store: RunLog, run_id: str) -> RunState:
        """The run as one store read (``RunLog.head``) returns it.

        Raises:
            CheckpointNotFoundError: no such run in this store's scope.
            CheckpointDecodeError: its checkpoint cannot be decoded.
        """
        run, cp = store.head(run_id)
        return cls(run, cp, cast(RunMeta, cp.meta))

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def paused(self) -> bool:
        """A step's last attempt failed under ``on_error="pause"``."""
        return "pause" in self.meta

    @property
    def done(self) -> bool:
        """Nothing is left to run: completed, or no step in the frontier."""
        return self.checkpoint.status == "completed" or not self.checkpoint.frontier

    @property
    def sleeping(self) -> bool:
        """Waiting for something a wake-up may deliver or time out (not paused)."""
        return self.checkpoint.status == "waiting" and "pause" not in self.meta

    def answered(self, wait_id: str) -> bool:
        """Question ``wait_id`` was answered (or delivered, timed out)
        already: it is among the run's last resolved waits. A question that
        left the pending waits otherwise (the run was canceled or failed by
        an operator) was not answered."""
        return wait_id in self.meta.get("resolved", [])

    def takeover(self, owner: str, now: Callable[[], float]) -> tuple[str, bool] | None:
        """How ``owner`` may take the run: ``None`` when no one else holds
        it, else ``(holder, dead)`` for a compare-and-set on that holder
        (``dead``: its process on this host exited, any expiry). Liveness beats
        clocks: a holder alive on this host is never taken over, however long
        ago its lease expired by any clock; a holder on another host is taken
        over only once its lease expired at ``now()`` (the store's clock, the
        database's on PostgreSQL: asked only when someone else holds the run).

        Raises:
            RunLeasedError: a live process holds the run.
        """
        run = self.run
        holder = run.lease_owner
        if holder is None or holder == owner:
            return None
        held = holding(holder, run.lease_expires_at, now())
        if held == "held":
            raise RunLeasedError(run.run_id, holder or "?", run.lease_expires_at)
        return holder, held == "dead"

    def refuse_resume(self) -> None:
        """Refuse to continue a run that ended by cancel or timeout.

        Raises:
            RunStateError: the run was canceled or timed out (replay or fork it).
        """
        run = self.run
        if run.status in ("canceled", "timed_out"):
            raise RunStateError(
                f"run {run.run_id} is {run.status}; it cannot be resumed. Replay or fork it "
                "from a checkpoint to run it again."
            )

    def check_version(self, flow_version: str) -> None:
        """Refuse to drive the run under another version of its flow.

        Raises:
            FlowVersionMismatchError: the run started under another version
                than ``flow_version``.
        """
        run = self.run
        if run.flow_version != flow_version:
            raise FlowVersionMismatchError(run.run_id, run.flow_version, flow_version)

    def refuse_answered(self, wait_id: str | None) -> None:
        """Refuse an answer to question ``wait_id`` once it was answered.

        Raises:
            WaitAlreadyResolvedError: ``wait_id`` was answered already (also
                by another process, which may be running the run on now).
        """
        if wait_id is not None and self.answered(wait_id):
            raise WaitAlreadyResolvedError(
                f"run {self.run.run_id}: wait {wait_id} was already answered; the first "
                "answer stands"
            )

    def input_wait(self, wait_id: str | None) -> Wait:
        """The question an answer goes to: ``wait_id``'s, or the only one pending.

        Raises:
            WaitAlreadyResolvedError: ``wait_id`` was answered already.
            RunStateError: the run is not waiting for input.
            WaitError: several questions are pending and ``wait_id`` is
                missing, or no pending question has ``wait_id``.
        """
        run_id = self.run.run_id
        inputs = input_waits(self.checkpoint.waits)
        self.refuse_answered(wait_id)
        status = self.checkpoint.status
        if status == "waiting" and not inputs:  # e.g. another answer took it on to a signal
            kinds = ", ".join(sorted({w.kind for w in self.checkpoint.waits})) or "nothing"
            raise RunStateError(
                f"run {run_id} waits, but for no answer (it waits for: {kinds}); "
                "nothing was answered"
            )
        if status != "waiting":
            raise RunStateError(f"run {run_id} is not waiting for input (status {status!r})")
        if wait_id is None:
            if len(inputs) > 1:
                raise WaitError(
                    f"run {run_id} has {len(inputs)} questions pending "
                    f"({', '.join(w.wait_id for w in inputs)}); answer one with wait_id=..."
                )
            return inputs[0]
        found = next((w for w in inputs if w.wait_id == wait_id), None)
        if found is None:
            raise WaitError(
                f"run {run_id} has no pending wait {wait_id}; pending: "
                f"{', '.join(w.wait_id for w in inputs)}"
            )
        return found
