"""What new users' tryouts of the app left over (and the fixes), each through
Textual's pilot on a real SQLite file: the runs screen's status filter offers
``moved``, as ``flowdesk runs --status moved`` does, and lists exactly the
runs the table shows moved (it offered the stored statuses and
``interrupted`` only); the fork dialog's editor has the focus as it opens,
and what is typed with the ``f`` that opens it goes into it (it was lost,
and the detail's own keys among it acted behind the dialog); the answer
dialog of a run whose flow the app does not register says so as it opens,
with what to set, and takes no answer (it said so only once one was typed
and sent)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from textual import events
from textual.widgets import Input, Select

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.fork import ForkScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.widgets.run_filters import STATUSES
from desktop_app.cli.output import Hints
from desktop_app.config import load_settings
from tests.app_support import answer_dialog, messages, settle, wait_until
from tests.chat_server import ChatServer
from tests.cli_support import flowdesk
from tests.test_app_detail import Counter, flows, make_run, open_detail, stored
from tests.test_app_forms import read_at_once
from tests.test_app_inbox_agent_answer import started_asking
from tests.test_db_copy_moved_runs import _env_all, asker
from tests.test_db_copy_moved_thread_race import THREAD, _waiting_thread
from tests.test_unregistered_flow_hints import bare, start

SIZE = (160, 40)


@pytest.mark.scenario("S131")
@pytest.mark.slow
@pytest.mark.postgres
async def test_the_status_filter_lists_exactly_the_runs_shown_moved(
    tmp_path: Path, pg_url: str
) -> None:
    """A flow run, an agent run and a LangGraph thread waiting in a file
    that ``flowdesk db copy`` then moved show ``moved``; a run that completed
    before the copy stays ``completed``. Status ``moved`` lists the three,
    as ``flowdesk runs --status moved`` on the file does, and the bar says
    ``status=moved``."""
    db = tmp_path / "laptop.db"
    env = {**os.environ, **_env_all(tmp_path)}  # asker's step logs into tmp_path
    with ChatServer() as server:
        agent_id, _ = started_asking(db, server)  # applies the schema too
    ids = []
    for _ in range(2):
        started = flowdesk(db, "start", "asker", "--input", "{}", env=env)
        assert started.returncode == 0, started.stderr
        ids.append(started.stdout.split()[0])
    flow_id, done_id = ids
    answered = flowdesk(db, "answer", done_id, "yes", env=env)
    assert answered.returncode == 0, answered.stderr
    _waiting_thread(db, tmp_path)
    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=env)
    assert copied.returncode == 0, copied.stderr
    listed = flowdesk(db, "runs", "--status", "moved", "-o", "jsonl", env=env)
    assert listed.returncode == 0, listed.stderr
    cli_moved = {json.loads(line)["run_id"] for line in listed.stdout.splitlines()}
    assert cli_moved == {flow_id, agent_id, THREAD}, listed.stdout

    assert "moved" in STATUSES
    settings = load_settings(db_path=db, recover_on_launch=False)
    app = FlowdeskApp(settings, flows=[asker], hints=Hints(str(db), None))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.table
        shown = {rid: table.cell(rid, "status") for rid in table.run_ids}
        assert shown[done_id] == "completed", shown
        shown_moved = {rid for rid, status in shown.items() if status == "moved"}
        assert shown_moved == cli_moved, shown
        await pilot.press("slash")
        await settle(pilot)
        status = app.query_one("#filter-status", Select)
        assert ("moved", "moved") in [(str(p), v) for p, v in status._options], status._options
        status.value = "moved"
        await settle(pilot)
        assert screen.filter.status == "moved"
        assert sorted(table.run_ids) == sorted(shown_moved)
        assert {table.cell(rid, "status") for rid in table.run_ids} == {"moved"}
        assert "status=moved" in str(screen.page_line.render())
        # interrupted lists none of them (they are moved, not interrupted)
        status.value = "interrupted"
        await settle(pilot)
        assert table.run_ids == []


async def test_the_fork_editor_has_the_focus_and_takes_what_is_typed_with_f(
    tmp_path: Path,
) -> None:
    """``f`` and text typed at once (one read of the terminal) on a run's
    detail: the dialog opens with its editor focused and the text in it; the
    detail's keys among it (``p`` replay, ``u`` undo) do nothing behind the
    dialog. Keys that reach the dialog before its editor has the focus go
    into the editor too, which takes the focus."""
    settings = load_settings(db_path=tmp_path / "t.db")
    run_id = make_run(settings, "counter", Counter())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot, run_id)
        read_at_once(app, "fpu")
        await settle(pilot)
        modal = app.screen
        assert isinstance(modal, ForkScreen), modal
        assert app.focused is modal.editor
        assert modal.editor.text.startswith('pu{\n  "name": "DEMO"'), modal.editor.text
        modal.set_focus(None)  # the dialog as drawn before its editor took the focus
        for key in "xy":
            modal.post_message(events.Key(key, key))  # queued for the screen itself
        await settle(pilot)
        assert app.focused is modal.editor and modal.editor.text.startswith("puxy{")
        await pilot.press("z")  # and typed after, into the editor
        assert modal.editor.text.startswith("puxyz{")
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is not modal and not isinstance(app.screen, ForkScreen)
    assert list(stored(tmp_path / "t.db")) == [run_id]  # nothing replayed or forked


@pytest.mark.scenario("S132")
async def test_the_answer_dialog_of_an_unregistered_flow_says_so_as_it_opens(
    tmp_path: Path,
) -> None:
    """A run of ``approver`` started by a program that registers it (``flowdesk
    start`` with FLOWDESK_FLOWS); ``a`` on it in an app that does not: the
    dialog shows the question and, at once, that it cannot be answered here
    and what to set, with no answer field or Yes/No/Send; keys typed there
    and enter send nothing; the run still waits."""
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = start(db, "approver")
    app = FlowdeskApp(load_settings(db_path=db, scope="team"))
    async with app.run_test(size=(120, 35)) as pilot:
        await wait_until(pilot, lambda: app.runs_screen.table.selected_run_id() == run_id)
        dialog = await answer_dialog(pilot)
        said = (
            f"Run {run_id[:8]} cannot be answered here: no flow named 'approver' is registered "
            "(known: digest, tidy). Set FLOWDESK_FLOWS (the flows setting) to the module "
            "attribute that defines its flow and relaunch the app, or answer it where its flow "
            "is registered."
        )
        prompt = str(dialog.query_one("#prompt").render())
        assert "OK?" in prompt and " ".join(said.split()) in " ".join(prompt.split()), prompt
        answer = dialog.query_one("#answer", Input)
        for control in (answer, *dialog.query("#as-json, #send, #answer-yes, #answer-no")):
            assert control.disabled and not control.display, control
        await pilot.press("y", "e", "s")
        await settle(pilot)
        assert answer.value == "" and app.screen is dialog
        await pilot.press("enter")  # Close has the focus
        await settle(pilot)
        assert app.screen is not dialog
        assert not [m for m in messages(app) if "answered" in m], messages(app)
    shown = flowdesk(db, "--scope", "team", "show", run_id, env=bare())
    assert "status waiting" in shown.stdout, shown.stdout
