"""A clock for races made deterministic in one process."""

from __future__ import annotations

from collections.abc import Callable

from desktop_app.flow.clock import ManualClock


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
