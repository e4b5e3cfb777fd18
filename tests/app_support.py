"""Helpers shared by the Textual Pilot tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

from textual.pilot import Pilot
from textual.worker import WorkerCancelled

T = TypeVar("T")


async def settle(pilot: Pilot[None]) -> None:
    """Wait until no worker runs and every message they posted was handled.

    A worker of an exclusive group is cancelled when a newer one replaces it
    (the inbox reloads that way); that is the app working, not a failure.
    """
    app = pilot.app
    for _ in range(100):
        for worker in list(app.workers):
            with contextlib.suppress(WorkerCancelled):
                await worker.wait()
        await pilot.pause()
        if not any(w.is_running for w in app.workers):
            await pilot.pause()
            return
    raise AssertionError("workers did not finish")


async def wait_until(pilot: Pilot[None], check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` while letting the app run, up to ``timeout`` seconds (a
    bound on a hang, never a timing assertion: 5 s was once too short for a
    screen to open under a CI run's load)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)
        await pilot.pause()


async def screen_after(pilot: Pilot[None], key: str, kind: type[T]) -> T:
    """Press ``key`` once the app has settled; the screen it opened (of
    type ``kind``), settled."""
    await settle(pilot)
    await pilot.press(key)
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, kind), screen
    return screen


async def open_inbox(pilot: Pilot[None]) -> Any:
    """Open the inbox (``i``) once the app has settled; the inbox screen,
    loaded."""
    from desktop_app.app.screens.inbox import InboxScreen

    return await screen_after(pilot, "i", InboxScreen)


async def answer_dialog(pilot: Pilot[None]) -> Any:
    """``a`` on the selected run once the app has settled: its answer dialog."""
    from desktop_app.app.screens.answer import AnswerScreen

    return await screen_after(pilot, "a", AnswerScreen)


def messages(app: Any, severity: str | None = None) -> list[str]:
    """The app's notices (every notification it showed), optionally of one severity."""
    return [n.message for n in app.notices if severity is None or n.severity == severity]
