"""The app's one pattern for work on runs in the background (no Textual here).

:class:`RunController` owns which runs this app is driving (at most one driver
per run id), the gate that keeps drivers waiting until launch recovery has
listed the runs it will resume (so recovery never picks up a run the app is
driving already), and :meth:`RunController.execute`, which runs one job on a
run and turns every outcome into a :class:`JobOutcome`. The app calls
``execute`` from its thread workers and posts the outcome as a message.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from desktop_app.errors import FlowdeskError

T = TypeVar("T")


@dataclass(frozen=True)
class JobOutcome(Generic[T]):
    """How a job ended: its ``result``, or ``error`` (text shown to a person)."""

    run_id: str
    result: T | None = None
    error: str | None = None
    #: the exception behind ``error`` (``None`` when the job returned).
    exception: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class RunController:
    """Claims, the launch-recovery gate and job execution for the app's runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._driving: set[str] = set()
        self._listed = threading.Event()

    # -- claims --------------------------------------------------------

    def claim(self, *run_ids: str) -> bool:
        """Mark runs as driven here; ``False`` (nothing claimed) if one already is."""
        with self._lock:
            if self._driving.intersection(run_ids):
                return False
            self._driving.update(run_ids)
            return True

    def release(self, *run_ids: str) -> None:
        with self._lock:
            self._driving.difference_update(run_ids)

    def driving(self) -> list[str]:
        """The runs driven now, sorted (for the message after Ctrl-C)."""
        with self._lock:
            return sorted(self._driving)

    def is_driving(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._driving

    # -- the launch-recovery gate --------------------------------------

    def open_gate(self) -> None:
        """Launch recovery has listed its runs (or will not run): drivers may start."""
        self._listed.set()

    def wait_for_gate(self) -> None:
        self._listed.wait()

    # -- jobs ----------------------------------------------------------

    def execute(self, run_id: str, job: Callable[[], T], *, what: str = "Run") -> JobOutcome[T]:
        """Run ``job`` for the already claimed ``run_id`` (call on a worker
        thread), then release it. Never raises: a Flowdesk error keeps its
        text, anything else becomes ``"<what> <id> stopped: <Type>: <text>"``."""
        try:
            self.wait_for_gate()
            return JobOutcome(run_id, result=job())
        except FlowdeskError as exc:
            return JobOutcome(run_id, error=str(exc), exception=exc)
        except Exception as exc:
            text = f"{what} {run_id[:8]} stopped: {type(exc).__name__}: {exc}"
            return JobOutcome(run_id, error=text, exception=exc)
        finally:
            self.release(run_id)
