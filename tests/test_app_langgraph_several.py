"""The app with a flow run and a LangGraph thread waiting on two questions
at once: the runs screen's banner counts both kinds (it counted flow runs
only), the inbox counts the thread's two questions and offers only what
works for them (its program answers them by interrupt id: an answer typed
in the app was refused), and the thread view says so instead of offering
``a``. Driven headless with Pilot over a real SQLite file."""

from __future__ import annotations

from pathlib import Path

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.langgraph_thread import ThreadScreen
from desktop_app.config import load_settings
from desktop_app.examples.approval import Approval, approval
from desktop_app.integrations.langgraph import FlowdeskSaver
from desktop_app.integrations.langgraph.threads import get_thread
from tests.app_support import messages, open_inbox, settle
from tests.test_langgraph_parallel_interrupts import build

SIZE = (160, 45)


async def test_banner_inbox_and_thread_view_with_two_questions_at_once(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    sv = bootstrap.open_services(settings, flows=[approval])
    try:
        assert sv.engine.run("approval", Approval(order="o-1")).status == "waiting"
    finally:
        sv.close()
    with FlowdeskSaver.open(db) as saver:
        build(saver).invoke({"got": []}, {"configurable": {"thread_id": "par-1"}})

    app = FlowdeskApp(settings, flows=[approval])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert str(app.runs_screen.hint.render()) == (
            "1 run is waiting: select one and press a to see what for. "
            "1 LangGraph thread is waiting for an answer: i opens the inbox."
        )
        inbox = await open_inbox(pilot)
        assert inbox.status_text == "1 flow question and 2 LangGraph questions wait for you."
        thread = next(i for i in inbox.items if i.kind == "langgraph")
        assert thread.how(app.hints) == (
            "2 questions at once: its program answers them (enter opens it)"
        )
        inbox.table.move_cursor(row=[i.run_id for i in inbox.items].index("par-1"))
        await pilot.press("y")  # approves nothing here: says what works instead
        await settle(pilot)
        assert messages(app, "warning")[-1] == (
            "LangGraph thread par-1: it waits on 2 questions at once, which its program "
            "answers by interrupt id; enter opens it."
        )
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ThreadScreen)
        head = str(screen.query_one("#thread-head").render())
        assert "It waits on 2 questions at once" in head, head
        assert "Command(resume={interrupt.id: value, ...})" in head
        assert "a: answer it here" not in head
        assert not screen.query_one("#answer").display  # no field that cannot work
        assert screen.check_action("answer", ()) is False
        await pilot.press("a", *"yes", "enter")
        await settle(pilot)
        assert not any("an answer stored here would go" in m for m in messages(app))

    with FlowdeskSaver.open(db) as saver:
        left = get_thread(saver.store, saver.scope, "par-1")
        assert left is not None and left.status == "waiting"  # nothing was stored
        assert sorted(left.interrupts) == ["question A", "question B"]
