"""What the engine hands back: run results, incompatible runs, sweep reports.

Plain records with no behaviour, in a module of their own so that the
driver and the engine both use them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from desktop_app.store.protocol import RunStatus


@dataclass(frozen=True)
class RunResult:
    """Where a run stands after ``run``/``resume`` returned.

    Attributes:
        run_id: the run.
        status: ``completed``, ``failed``, ``waiting``, ``canceled``, ...
        state: the latest state (an instance of the flow's pydantic model).
        revision: the latest checkpoint revision.
        error: why the run failed, halted or paused, else ``None``.
    """

    run_id: str
    status: RunStatus
    state: Any
    revision: int
    error: str | None = None


@dataclass(frozen=True)
class IncompatibleRun:
    """A live run started under another version of its flow (S51).

    Attributes:
        run_id / flow_name / status: the run.
        step: the step it stopped at (head of its frontier).
        stored_version: the flow version the run started under.
        current_version: the version registered now.
    """

    run_id: str
    flow_name: str
    status: RunStatus
    step: str
    stored_version: str
    current_version: str


@dataclass
class ResumePendingResult:
    """What :meth:`Engine.resume_pending` did.

    Attributes:
        resumed: results of the runs resumed, in order.
        failed_run_id: the run that stopped the sweep, or ``None``.
        error: that run's error, or ``None``.
    """

    resumed: list[RunResult] = field(default_factory=list)
    failed_run_id: str | None = None
    error: BaseException | None = None
