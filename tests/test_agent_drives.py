"""``desktop_app.agent.drives``: what the app's quit asks of the agent runs
it drives on event loops of their own (each in a thread, as the inbox's
answers run), and how long it waits for them."""

from __future__ import annotations

import asyncio
import threading
import time

from desktop_app.agent import drives


def drive_in_thread(body, outcome: list[str]) -> threading.Thread:  # type: ignore[no-untyped-def]
    """``asyncio.run`` of ``body`` inside :func:`drives.driving`, on a thread;
    ``outcome`` gets "canceled" or "done"; returns once the drive is registered."""
    started = threading.Event()

    async def main() -> None:
        with drives.driving():
            started.set()
            await body()

    def run() -> None:
        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            outcome.append("canceled")
        else:
            outcome.append("done")

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(10)
    return thread


def test_stop_all_cancels_every_drive_and_returns_once_they_ended() -> None:
    outcome: list[str] = []
    threads = [drive_in_thread(lambda: asyncio.sleep(60), outcome) for _ in range(2)]
    t0 = time.monotonic()
    assert drives.stop_all(30) == 0
    assert time.monotonic() - t0 < 10  # not the drives' minute, nor the 30 s bound
    for thread in threads:
        thread.join(10)
    assert outcome == ["canceled", "canceled"]
    assert drives.stop_all(30) == 0  # none left registered


def test_stop_all_waits_for_a_drive_finishing_its_call_then_gives_up_at_the_bound() -> None:
    outcome: list[str] = []
    release = threading.Event()

    async def a_call_that_ends_first() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            # the tool call in flight ends (and its result is saved) first
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
            raise

    thread = drive_in_thread(a_call_that_ends_first, outcome)
    t0 = time.monotonic()
    assert drives.stop_all(0.3) == 1  # still in its call after the bound: counted
    assert time.monotonic() - t0 >= 0.3
    release.set()
    thread.join(10)
    assert outcome == ["canceled"]
    assert drives.stop_all(0.3) == 0


def test_stop_all_with_no_drive_returns_at_once() -> None:
    t0 = time.monotonic()
    assert drives.stop_all(30) == 0
    assert time.monotonic() - t0 < 1


def test_a_synchronous_drive_is_asked_to_stop_and_waited_for_then_counted_at_the_bound() -> None:
    """The own runtime's drives (a thread in ``driving_thread``): ``stop_all``
    asks each (``stop_asked`` turns true in that thread only) and waits for
    it to leave the block; one still busy at the bound is counted."""
    inside, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def drive() -> None:
        with drives.driving_thread():
            seen.append(drives.stop_asked())  # not asked yet
            inside.set()
            while not drives.stop_asked():
                time.sleep(0.01)
            seen.append(True)
            release.wait(30)  # its call in flight ends only when released
        seen.append(drives.stop_asked())  # out of the block: never asked

    thread = threading.Thread(target=drive)
    thread.start()
    assert inside.wait(10)
    assert not drives.stop_asked()  # another thread's stop is not this one's
    t0 = time.monotonic()
    assert drives.stop_all(0.3) == 1  # still in its call after the bound: counted
    assert time.monotonic() - t0 >= 0.3
    release.set()
    thread.join(10)
    assert seen == [False, True, False]
    assert drives.stop_all(0.3) == 0  # none left registered
