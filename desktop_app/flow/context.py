"""Execution context (identity of a run) and the per-step context a step sees."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from desktop_app.errors import DomainReadError, QueryRefusedError, StepTimeoutError
from desktop_app.store import codec
from desktop_app.store.protocol import DomainWrite, Intent

#: ``journal(step_key, seq, kind, proposed_id) -> child_id``: the child id
#: recorded for that slot, recording ``proposed_id`` durably when none is.
ChildJournal = Callable[[str, int, str, str], str]

T = TypeVar("T")


def asked_digest(prompt: Any) -> str:
    """The identity of a question: SHA-256 (hex, 64 characters) of the
    canonical JSON of ``{"prompt": prompt}`` (:func:`desktop_app.store.codec.dumps`:
    sorted keys, compact, the encoding checkpoints use, so a prompt read back
    from a checkpoint has the digest it had when it was asked).

    Args:
        prompt: what the person is shown, any JSON value (text, or an object
            with the payload to approve).

    Raises:
        TypeError: ``prompt`` is not JSON (it could not be saved either).
    """
    return hashlib.sha256(codec.dumps({"prompt": prompt}).encode()).hexdigest()


class Interrupt(BaseException):
    """Raised by :meth:`StepContext.interrupt` to pause the run for a person.

    A ``BaseException`` so that a step's ``except Exception`` cannot swallow
    it (as DBOS builds its cancellation errors).
    """

    def __init__(self, requests: list[InterruptRequest]) -> None:
        super().__init__(f"interrupted: {[r.wait_id for r in requests]}")
        self.requests = requests


class InterruptRequest:
    """One pending question: its stable wait id, prompt, continuation, timeout."""

    __slots__ = ("choices", "continuation", "prompt", "step_id", "timeout_s", "wait_id")

    def __init__(
        self,
        wait_id: str,
        step_id: str,
        prompt: Any,
        continuation: Any,
        timeout_s: float | None,
        choices: tuple[str, ...] | None = None,
    ) -> None:
        self.wait_id = wait_id
        self.step_id = step_id
        self.prompt = prompt
        self.continuation = continuation
        self.timeout_s = timeout_s
        self.choices = choices


def _new_trace() -> str:
    return uuid.uuid4().hex


_HEX = frozenset("0123456789abcdef")


def trace_id_problem(trace_id: str) -> str | None:
    """Why ``trace_id`` is not a W3C trace id (32 lowercase hex digits, not
    all zeros: OpenTelemetry's and the W3C trace-context's), or ``None``
    when it is one. A run's spans join the trace its context names; with
    an id that is not one they started a new trace in each process, which
    the id shown with the run never found."""
    if len(trace_id) == 32 and _HEX.issuperset(trace_id) and trace_id.strip("0"):
        return None
    return (
        f"trace_id {trace_id!r} is not a W3C trace id (32 lowercase hex digits, not all "
        "zeros), so the run's spans could not join that trace; give one (an OpenTelemetry "
        "span's: format(span.get_span_context().trace_id, '032x')) or none, and each new "
        "run gets its own"
    )


#: :meth:`ExecutionContext.model_validate`'s ``context`` for a context read
#: back from the database: one an older version stored is taken as it was
STORED = {"stored": True}


class ExecutionContext(BaseModel):
    """Identity of a run, exactly these six ids (Flower's ExecutionContext).

    Persisted with the run and restored on every path (resume, waits,
    success, cancel); child runs inherit all but ``run_id``. Identity only:
    never put domain data here. Immutable. ``trace_id``, when given, is a W3C
    trace id (32 lowercase hex digits, not all zeros): another is refused
    (``pydantic.ValidationError``), as the run's spans could not join it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    trace_id: str | None = None
    correlation_id: str | None = None

    @field_validator("trace_id")
    @classmethod
    def _w3c_trace_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Refuse a ``trace_id`` that is not a W3C trace id
        (:func:`trace_id_problem`; pydantic's ``ValidationError`` says why),
        except in a context read back from the database (``STORED``)."""
        if value is None or (info.context or {}).get("stored"):
            return value
        problem = trace_id_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def for_run(self, run_id: str) -> ExecutionContext:
        """This context as run ``run_id``'s: its ``run_id`` set, and a trace id
        (W3C, 32 hex), its own or a new one, so a run's spans and its stored
        context agree."""
        update = {"run_id": run_id}
        if not self.trace_id:
            update["trace_id"] = _new_trace()
        return self.model_copy(update=update)

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> ExecutionContext:
        """Pydantic's copy, with a ``trace_id`` in ``update`` checked as the
        constructor checks it (pydantic's ``model_copy`` validates nothing).

        Raises:
            ValueError: the ``trace_id`` given is not a W3C trace id
                (:func:`trace_id_problem`); nothing was copied.
        """
        given = (update or {}).get("trace_id")
        if isinstance(given, str) and (problem := trace_id_problem(given)):
            raise ValueError(problem)
        return super().model_copy(update=update, deep=deep)


class StepContext:
    """What a running step may see and do.

    Attributes:
        run_id: the run.
        step_id: the step.
        attempt: 1-based attempt number of this execution (survives restarts).
        iteration: for loop steps, the 1-based iteration being run; else 0.
        visit: how many times the run entered this step before (0 on the
            first visit). A route, an error route or a timeout route back to
            a step that already ran starts a new visit, and from the second
            visit on the step's keys (:attr:`visit_key`) carry it.
        context: the run's :class:`ExecutionContext` (read-only).
    """

    __slots__ = (
        "_abandoned",
        "_answered",
        "_answers",
        "_asked",
        "_children",
        "_continuations",
        "_intents",
        "_journal",
        "_lease_lost",
        "_progress",
        "_query",
        "_timeout_s",
        "_writes",
        "attempt",
        "context",
        "iteration",
        "run_id",
        "step_id",
        "visit",
    )

    def __init__(
        self,
        run_id: str,
        step_id: str,
        attempt: int,
        context: ExecutionContext,
        iteration: int = 0,
        query: Callable[[Callable[[Any], Any]], Any] | None = None,
        answers: Mapping[str, Any] | None = None,
        answered: Mapping[str, str] | None = None,
        continuations: Mapping[str, Any] | None = None,
        journal: ChildJournal | None = None,
        visit: int = 0,
        lease_lost: Callable[[], bool] | None = None,
    ) -> None:
        self.run_id = run_id
        self.step_id = step_id
        self.visit = visit
        self.attempt = attempt
        self.iteration = iteration
        self.context = context
        self._writes: list[DomainWrite] = []
        self._progress: tuple[int, int] | None = None
        self._query = query
        self._answers = answers or {}
        self._answered = answered or {}
        self._continuations = continuations or {}
        self._asked = 0
        self._intents: list[Intent] = []
        #: set once (by the caller's thread) when the attempt times out; a
        #: plain flag, not an Event: one was made per attempt, for nothing
        #: ever waits on it
        self._abandoned = False
        self._timeout_s = 0.0
        self._journal = journal
        self._children = 0
        self._lease_lost = lease_lost

    @property
    def visit_key(self) -> str:
        """This visit of the step, as its wait ids, idempotency key and child
        runs name it: the step id on the first visit, ``"<step_id>@<k>"`` on
        the k-th (k = 2, 3, …), so a step the run enters again never meets
        the answers, intents or children of its earlier visits. ``@`` is
        reserved in step ids and branch names for this."""
        return self.step_id if not self.visit else f"{self.step_id}@{self.visit + 1}"

    @property
    def cancelled(self) -> bool:
        """True once this attempt timed out (``timeout_s``): nothing it does is
        committed any more, and ``write``/``send`` raise; or once this process
        can no longer prove it holds the run's lease (another process took the
        run, or the heartbeat could not renew it for the lease's TTL): nothing
        more is committed, and the step runs again wherever the run resumes.
        A long synchronous step should check it between units of work and
        return early."""
        return self._abandoned or (self._lease_lost is not None and self._lease_lost())

    def abandon(self, timeout_s: float) -> None:
        """Engine-internal: the attempt timed out; drop and refuse its effects."""
        self._timeout_s = timeout_s
        self._abandoned = True
        self._writes = []
        self._intents = []

    def _refuse_if_abandoned(self) -> None:
        if self._abandoned:
            raise StepTimeoutError(self.step_id, self._timeout_s)

    def child_run_id(self, kind: str = "flow") -> str:
        """The run id for the next child run (``kind``: ``"flow"``, ``"agent"``)
        this step starts, recorded in the parent's journal before it returns.

        The n-th child of a step (per iteration) is journaled under the step
        and n; every re-execution of the step, in this run, a replay, a fork
        or a fork onto a new flow version, gets the recorded id back, so it
        reattaches to the child it started instead of starting a second one.
        The first id is ``"<run_id>:<visit_key>"`` (:attr:`visit_key`: the step id, with
        ``@<k>`` on the step's k-th visit), later ones add ``":<n>"``.

        Raises:
            StepTimeoutError: the attempt timed out.
            StoreError: the journal entry could not be saved.
        """
        self._refuse_if_abandoned()
        seq = self._children
        self._children += 1
        key = f"{self.visit_key}#{self.iteration}" if self.iteration else self.visit_key
        proposed = f"{self.run_id}:{key}" + (f":{seq}" if seq else "")
        if self._journal is None:
            return proposed
        return self._journal(key, seq, kind, proposed)

    def interrupt(
        self,
        prompt: Any = None,
        *,
        continuation: Any = None,
        timeout_s: float | None = None,
        choices: Sequence[str] | None = None,
    ) -> Any:
        """Ask a person; the run pauses (status ``waiting``) until
        ``Engine.resume_with(run_id, value, wait_id=...)`` answers, then the step
        runs again and this call returns the answer (LangGraph ``interrupt``).

        Each call in a step has a stable wait id ``"<run_id>:<visit_key>:<n>"``
        (:attr:`visit_key`: the step id, with ``@<k>`` on its k-th visit; n counts
        the calls in this visit), so several questions, also from parallel
        branches, are answered one by one. ``continuation`` (JSON) is
        kept with the wait and readable as :attr:`continuation` once answered
        (looprig's StatefulInterrupt). ``timeout_s``: past it the run ends
        ``timed_out``. ``choices`` (lower-case words, e.g. ``("yes", "no")``):
        the only answers taken; ``resume_with`` refuses any other text with
        ``InputError`` and nothing changes (the run keeps waiting), and gives
        the step the chosen word trimmed and lower-cased.

        An answer is bound to what was shown: it is stored with
        :func:`asked_digest` of ``prompt``, and returned only to a call at the
        same place whose prompt has that digest. A step re-executed after a
        crash that asks something else (another text, another payload)
        pauses again on a new wait id ``"<wait id>.<first 16 hex of the
        digest>"``; the old answer is never applied to another question. An
        answer stored before answers were bound (no digest) is not applied
        either: its question is asked again, once.

        Raises:
            Interrupt: the question is not answered yet (the engine pauses the run).
            TypeError: ``prompt`` is not JSON.
        """
        base = f"{self.run_id}:{self.visit_key}:{self._asked}"
        self._asked += 1
        digest = asked_digest(prompt)
        again = f"{base}.{digest[:16]}"
        for wait_id in (base, again):
            if wait_id in self._answers and self._answered.get(wait_id) == digest:
                return self._answers[wait_id]
        # unanswered, or answered when something else was shown (or before
        # answers were bound, no digest): this question is asked on its own
        wait_id = base if base not in self._answers else again
        only = tuple(choices) if choices else None
        raise Interrupt(
            [InterruptRequest(wait_id, self.step_id, prompt, continuation, timeout_s, only)]
        )

    @property
    def continuation(self) -> Any:
        """The continuation value saved by this step's last answered interrupt, or ``None``."""
        return self._continuations.get(self.step_id)

    def send(self, destination: str, payload: Any, *, key: str | None = None) -> str:
        """Queue a side effect in the outbox; returns its idempotency key.

        The intent commits with this step's checkpoint and is delivered after
        commit by the dispatcher, always with the same key (default
        ``"<run_id>:<visit_key>:<iteration>:<n>"``), so the destination can
        de-duplicate and a restart reconciles instead of sending again.
        """
        self._refuse_if_abandoned()
        intent_id = key or f"{self.idempotency_key}:{len(self._intents)}"
        self._intents.append(Intent(intent_id, self.run_id, self.step_id, destination, payload))
        return intent_id

    def take_intents(self) -> list[Intent]:
        intents, self._intents = self._intents, []
        return intents

    def query(self, op: Callable[[Any], T]) -> T:
        """Run a read-only domain query op (see ``desktop_app.store.domain``)
        and return what it returns.

        Raises:
            DomainReadError: the database refused the query itself (a missing
                table or column, wrong SQL, a write): the step fails under its
                ``on_error`` policy, not retried.
            StoreError: the database could not be read (locked past the busy
                timeout, unreachable): the run stops as for a failed save and
                resumes later.
        """
        if self._query is None:
            raise RuntimeError("this step context has no store to query")
        try:
            result: T = self._query(op)
        except QueryRefusedError as exc:
            raise DomainReadError(f"step {self.step_id!r}: its domain query failed: {exc}") from exc
        return result

    @property
    def idempotency_key(self) -> str:
        """Stable across re-executions of this step visit (and iteration):
        ``"<run_id>:<visit_key>:<iteration>"`` (:attr:`visit_key`: the step id, with
        ``@<k>`` on its k-th visit). Pass it to external systems."""
        return f"{self.run_id}:{self.visit_key}:{self.iteration}"

    def write(self, op: DomainWrite) -> None:
        """Stage a domain write; it runs in the transaction that saves this
        step's (or loop iteration's) checkpoint, so it commits exactly once
        with it, or not at all. Raises StepTimeoutError once the attempt timed out."""
        self._refuse_if_abandoned()
        self._writes.append(op)

    def progress(self, done: int, total: int) -> None:
        """Report units of work done out of ``total``; saved with the next checkpoint."""
        self._progress = (int(done), int(total))

    def take_writes(self) -> list[DomainWrite]:
        writes, self._writes = self._writes, []
        return writes

    def take_progress(self) -> tuple[int, int] | None:
        p, self._progress = self._progress, None
        return p
