"""Asking an agent from the app: the answer shows in the conversation view
delta by delta as it streams, then the stored run. The model is a scripted
one whose stream the test releases one delta at a time (no sleeps)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from desktop_app.agent import ScriptedModel
from desktop_app.agent.models import StreamDelta
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.agent_runs import AgentRunsScreen
from desktop_app.app.screens.ask import AskScreen, StreamingAnswer
from desktop_app.config import load_settings
from tests.app_support import settle, wait_until


class GatedModel(ScriptedModel):
    """Streams its scripted answer word by word, each word only once released."""

    def __init__(self, turns: list[Any]) -> None:
        super().__init__(turns)
        self.gate = threading.Semaphore(0)
        self.sent = 0

    def stream(
        self, messages: Sequence[Any], tools: Sequence[dict[str, Any]]
    ) -> Iterator[StreamDelta]:
        for delta in super().stream(messages, tools):
            if delta.text:
                assert self.gate.acquire(timeout=10), "the test never released a delta"
                self.sent += 1
            yield delta


async def test_an_answer_streams_into_the_conversation_view(tmp_path: Path) -> None:
    model = GatedModel(["Paris is the capital"])
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"), model=model)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("g")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AgentRunsScreen)
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AskScreen)
        await pilot.press(*"capital of France?")
        await pilot.press("enter")
        stream = screen.query_one(StreamingAnswer)
        await wait_until(pilot, lambda: stream.display and stream.question != "")
        assert stream.answer == ""
        model.gate.release()
        await wait_until(pilot, lambda: stream.answer == "Paris")
        model.gate.release()
        await wait_until(pilot, lambda: stream.answer == "Paris is")
        assert "Paris is" in str(stream.render())
        model.gate.release()
        model.gate.release()
        await wait_until(pilot, lambda: screen.answered is not None)
        await settle(pilot)
        assert screen.answered is not None and screen.answered.status == "done"
        assert not stream.display  # the stored conversation replaces the stream
        assert screen.shown is not None
        assert screen.shown.run.run_id == screen.answered.run_id
        assert screen.shown.run.response == "Paris is the capital"
        assert "capital of France?" in screen.conversation
        assert model.sent == 4


async def test_asking_without_a_model_says_how_to_set_one_up(tmp_path: Path) -> None:
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("g")
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        await pilot.press(*"hello", "enter")
        await settle(pilot)
        assert any("No model is set up" in n.message for n in app.notices)
