"""The Pydantic AI journal's wait for a tool call in flight
(``durability._to_its_end``), in-process: what a cancel of the awaiting
task (Ctrl-C's, a caller's timeout) does to a call that runs, ends or
fails meanwhile. The real Ctrl-C of a real process: tests/test_pydantic_ai.py."""

from __future__ import annotations

import asyncio
import threading

import pytest

from desktop_app.integrations.pydantic_ai.durability import _to_its_end


async def test_a_call_not_canceled_gives_its_result() -> None:
    async def call() -> str:
        await asyncio.sleep(0)
        return "done"

    assert await _to_its_end(call(), "r1", "lookup") == ("done", False)


async def test_a_cancel_during_the_call_waits_for_its_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()

    async def call() -> str:  # a tool in a thread, as a sync tool runs
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
        return "done"

    outer = asyncio.ensure_future(_to_its_end(call(), "r1", "lookup"))
    await asyncio.sleep(0.05)
    outer.cancel()  # Ctrl-C: asyncio.run cancels its main task
    await asyncio.sleep(0.05)
    assert not outer.done()  # still waiting for the call
    release.set()
    assert await outer == ("done", True)  # its result, then the caller stops
    assert "stopping agent run r1 once its call to lookup in flight ends" in caplog.text


async def test_a_call_that_fails_after_a_cancel_lets_the_cancel_go_on() -> None:
    release = threading.Event()

    async def call() -> str:
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
        raise RuntimeError("the tool failed")

    outer = asyncio.ensure_future(_to_its_end(call(), "r1", "lookup"))
    await asyncio.sleep(0.05)
    outer.cancel()
    await asyncio.sleep(0.05)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await outer  # nothing to save: canceled, not the tool's error


async def test_a_call_that_fails_without_a_cancel_raises_its_own_error() -> None:
    async def call() -> str:
        raise RuntimeError("the tool failed")

    with pytest.raises(RuntimeError, match="the tool failed"):
        await _to_its_end(call(), "r1", "lookup")
