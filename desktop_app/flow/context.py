"""Execution context (identity of a run) and the per-step context a step sees."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from desktop_app.store.protocol import DomainWrite

T = TypeVar("T")


class ExecutionContext(BaseModel):
    """Identity of a run, exactly these six ids (Flower's ExecutionContext).

    Persisted with the run and restored on every path (resume, waits,
    success, cancel); child runs inherit all but ``run_id``. Identity only:
    never put domain data here. Immutable.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    trace_id: str | None = None
    correlation_id: str | None = None


class StepContext:
    """What a running step may see and do.

    Attributes:
        run_id: the run.
        step_id: the step.
        attempt: 1-based attempt number of this execution (survives restarts).
        iteration: for loop steps, the 1-based iteration being run; else 0.
        context: the run's :class:`ExecutionContext` (read-only).
    """

    __slots__ = (
        "_progress",
        "_query",
        "_writes",
        "attempt",
        "context",
        "iteration",
        "run_id",
        "step_id",
    )

    def __init__(
        self,
        run_id: str,
        step_id: str,
        attempt: int,
        context: ExecutionContext,
        iteration: int = 0,
        query: Callable[[Callable[[Any], Any]], Any] | None = None,
    ) -> None:
        self.run_id = run_id
        self.step_id = step_id
        self.attempt = attempt
        self.iteration = iteration
        self.context = context
        self._writes: list[DomainWrite] = []
        self._progress: tuple[int, int] | None = None
        self._query = query

    def query(self, op: Callable[[Any], T]) -> T:
        """Run a read-only domain query op (see ``desktop_app.store.domain``)."""
        if self._query is None:
            raise RuntimeError("this step context has no store to query")
        result: T = self._query(op)
        return result

    @property
    def idempotency_key(self) -> str:
        """Stable across re-executions of this step (and iteration):
        ``"<run_id>:<step_id>:<iteration>"``. Pass it to external systems."""
        return f"{self.run_id}:{self.step_id}:{self.iteration}"

    def write(self, op: DomainWrite) -> None:
        """Stage a domain write; it runs in the transaction that saves this
        step's (or loop iteration's) checkpoint, so it commits exactly once
        with it, or not at all."""
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


StepFn = Callable[..., Any]
