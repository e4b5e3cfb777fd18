"""The app on a SQLite file after ``flowdesk db copy`` moved what waited in it.

The hole it closes: the inbox still listed the file's moved flow run, agent
run and LangGraph thread as answerable (y / n / enter), and answering them
there failed with the moved error; the run's detail, the agent run's view
and the thread's view offered answers the file refuses. Now the inbox lists
them as moved, as ``flowdesk waiting`` on the file does (the same words:
where to, and the ``flowdesk --db URL show R`` that shows each there, run
here as printed), no key sends anything, and each view says where it moved.

Real processes make the three waits on a real file (``flowdesk start``, a
``flowdesk ask`` whose model is a scripted server on 127.0.0.1, the user's
LangGraph program); a real ``flowdesk db copy`` moves them to a real
PostgreSQL.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.agent_runs import AgentRunsScreen
from desktop_app.app.screens.inbox import InboxScreen
from desktop_app.app.screens.langgraph_thread import ThreadScreen
from desktop_app.cli.output import Hints
from desktop_app.config import load_settings
from desktop_app.errors import redact
from tests.app_support import open_inbox, settle
from tests.chat_server import ChatServer
from tests.cli_support import REPO, as_printed, flowdesk
from tests.test_app_inbox_agent_answer import started_asking
from tests.test_db_copy_moved_runs import asker
from tests.test_db_copy_moved_thread_race import THREAD, _waiting_thread

FLOWS = '["tests.test_db_copy_moved_runs:asker"]'


@pytest.mark.slow
@pytest.mark.postgres
async def test_the_inbox_lists_what_db_copy_moved_as_moved_with_where_to_see_it_and_answers_none(
    tmp_path: Path, pg_url: str
) -> None:
    db = tmp_path / "laptop.db"
    env = {**os.environ, "FLOWDESK_FLOWS": FLOWS, "PYTHONPATH": str(REPO)}
    with ChatServer() as server:
        agent_id, _ = started_asking(db, server)  # applies the schema too
    asked = flowdesk(db, "start", "asker", "--input", "{}", env=env)
    assert asked.returncode == 0, asked.stderr
    flow_id = asked.stdout.split()[0]
    _waiting_thread(db, tmp_path)
    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=env)
    assert copied.returncode == 0, copied.stderr
    where = redact(pg_url, mask=None)
    waiting = flowdesk(db, "waiting", env=env)  # what the CLI says of the file
    assert waiting.returncode == 0, waiting.stderr
    cli_lines = waiting.stdout.splitlines()[1:]
    assert waiting.stdout.splitlines()[0] == "no waiting runs", waiting.stdout

    settings = load_settings(db_path=db)
    app = FlowdeskApp(settings, flows=[asker], hints=Hints(str(db), None))
    async with app.run_test(size=(240, 50)) as pilot:
        inbox = await open_inbox(pilot)
        hints = app.hints
        by_id = {i.run_id: i for i in inbox.items}
        assert sorted(by_id) == sorted([flow_id, agent_id, THREAD])
        assert {i.moved_to for i in inbox.items} == {where}
        # each row says what `flowdesk waiting` on the file says of it
        said = sorted(f"{i.noun} {i.run_id} {i.how(hints)}" for i in inbox.items)
        assert said == sorted(cli_lines), (said, cli_lines)
        assert inbox.status_text == (
            f"Nothing is waiting for you. 3 more were waiting when flowdesk db copy moved them "
            f"to {where}: answered there, not here (select one: the question says how to see "
            "it there)."
        )
        # nothing here to answer: the footer offers no Approve, Reject or
        # Answer, and no key answers any of them; each says where it moved
        offered = {key: active.binding.action for key, active in inbox.active_bindings.items()}
        assert "y" not in offered and "n" not in offered, offered
        assert offered.get("enter") != "answer" and offered.get("space") != "mark", offered
        for row in range(3):
            inbox.table.move_cursor(row=row)
            await settle(pilot)
            item = inbox.selected
            assert item is not None
            shown = inbox.question_text
            assert f"{item.noun.capitalize()} {item.moved_text(hints)}" in shown, shown
            for key in ("y", "n", "enter", "space"):
                await pilot.press(key)
                await settle(pilot)
                assert isinstance(app.screen, InboxScreen), key  # no dialog opened
        assert not inbox.marked and not inbox.answering
        # the hint each row shows runs as printed and shows it there, still waiting
        for item in inbox.items:
            hint = item.how(hints).split("(see it there: ", 1)[1].removesuffix(")")
            assert hint == f"flowdesk --db {where} show {item.run_id}"
            there = as_printed(hint, "")
            assert there.returncode == 0, there.stderr
            status = "input_required" if item.kind == "agent" else "waiting"
            assert status in there.stdout, there.stdout

        # the flow run's detail, the agent run's view and the thread's view say it moved
        app.controller.open_run(flow_id)
        await settle(pilot)
        header = str(app.screen.query_one("#run-header").render())
        assert f"moved — moved to {where} by flowdesk db copy" in header, header
        assert f"flowdesk --db {where} show {flow_id}" in header
        app.pop_screen()
        app.controller.open_agent_run(agent_id)
        await settle(pilot)
        assert isinstance(app.screen, AgentRunsScreen)
        view = str(app.screen.query_one("#agent-conversation").render())
        assert f"Moved: moved to {where} by flowdesk db copy" in view, view
        assert "Answer it" not in view  # no answer the file would refuse
        app.pop_screen()
        app.controller.open_thread(THREAD)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ThreadScreen)
        head = str(screen.query_one("#thread-head").render())
        assert f"moved to {where} by flowdesk db copy: its program continues it there" in head
        assert "a: answer it here" not in head and not screen.has_class("-waiting")
        assert screen.check_action("answer", ()) is False

    # nothing was answered: each waits on PostgreSQL as the copy left it
    for rid, status in ((flow_id, "waiting"), (agent_id, "input_required")):
        shown = flowdesk(pg_url, "runs", "--json")
        rows = {r["run_id"]: r["status"] for r in map(json.loads, shown.stdout.splitlines())}
        assert rows[rid] == status, rows
    assert "status waiting" in flowdesk(pg_url, "show", THREAD).stdout
