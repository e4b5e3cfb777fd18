"""A clock for races made deterministic in one process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from desktop_app.flow import CompiledFlow, Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class HookClock(ManualClock):
    """A manual clock that runs ``hook`` once, the first time it is read
    after :meth:`arm`: another process acting between this engine's read of
    a run and its save."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[], None] | None = None

    def arm(self, hook: Callable[[], None]) -> None:
        self.hook = hook

    def now(self) -> float:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return super().now()


@contextmanager
def racing_engines(
    db_path: Path, flow: Callable[[], CompiledFlow[Any]]
) -> Iterator[tuple[Engine, Engine, HookClock]]:
    """Two engines over one SQLite file, as two processes have it:
    ``first`` on a :class:`ManualClock`, ``second`` on a :class:`HookClock`
    whose armed hook lets ``first`` act between ``second``'s read of a run
    and its save. ``flow`` builds the flow each registers. Both stores are
    closed at the end."""
    first = Engine(open_store(db_path), flows=[flow()], clock=ManualClock())
    clock = HookClock()
    second = Engine(open_store(db_path), flows=[flow()], clock=clock)
    try:
        yield first, second, clock
    finally:
        first.store.close()
        second.store.close()
