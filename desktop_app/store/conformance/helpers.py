"""Small tools the checks share: assertions that raise
:class:`~desktop_app.store.conformance.suite.ConformanceError`, fresh ids,
records and checkpoints, threads released at once, and a store whose lease
clock a check controls."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from desktop_app.store.conformance.suite import ConformanceError, Harness, ManualTime
from desktop_app.store.protocol import (
    Checkpoint,
    CheckpointStore,
    RunRecord,
)


def _ok(cond: object, what: str) -> None:
    if not cond:
        raise ConformanceError(what)


def _eq(got: object, want: object, what: str) -> None:
    if got != want:
        raise ConformanceError(f"{what}: got {got!r}, expected {want!r}")


@contextlib.contextmanager
def _raises(kind: type[BaseException], what: str, message: str | None = None) -> Iterator[None]:
    """Expect ``kind`` from the block; with ``message``, exactly that text."""
    try:
        yield
    except kind as exc:
        if message is not None:
            _eq(str(exc), message, what)
        return
    raise ConformanceError(f"{what}: expected {kind.__name__}, nothing was raised")


def _id() -> str:
    return uuid.uuid4().hex


def _run(run_id: str, t: float = 1000.0, **kw: Any) -> RunRecord:
    return RunRecord(run_id, kw.pop("flow", "f"), kw.pop("version", "v1"), "running", 0, t, t, **kw)


def _cp(
    run_id: str, rev: int, state: dict[str, Any] | None = None, status: Any = "running", **kw: Any
) -> Checkpoint:
    return Checkpoint(
        run_id,
        rev,
        status,
        state if state is not None else {},
        kw.pop("steps", {}),
        kw.pop("frontier", ("a",)),
        kw.pop("t", 1000.0) + rev,
        **kw,
    )


def _threads(n: int, target: Callable[[int], None]) -> None:
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:
            errors.append(exc)

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    if errors:
        raise errors[0]


def _clocked(h: Harness) -> tuple[CheckpointStore, ManualTime, float | None]:
    """A store whose lease clock the check controls: an injected clock, or
    (``database_clock``) explicit ``now=`` arguments from a manual time
    started at the database's now."""
    if "database_clock" in h.capabilities:
        s = h.store()
        return s, ManualTime(s.now()), 0.0
    clock = ManualTime()
    return h.store(clock.now), clock, None
