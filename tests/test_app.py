"""The Textual app, driven headless with Pilot over real SQLite files.

Assertions use the app's own state (``app.notices``, the tables' cells) and,
after the app has closed its connections, the store itself.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from textual.pilot import Pilot
from textual.widgets import Button, DataTable, Input, Label

from desktop_app import bootstrap
from desktop_app.app.format import countdown
from desktop_app.app.main import FlowdeskApp, Notice
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.confirm import ConfirmScreen
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.new_run import NewDigestScreen, default_out
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.widgets.run_tables import CheckpointsTable, StepsTable, group_history
from desktop_app.app.widgets.runs_table import MIN_WIDTHS
from desktop_app.config import Settings, load_settings
from desktop_app.flow import CompiledFlow, FlowBuilder
from desktop_app.flows.digest import DigestInput, DigestState, build_digest_flow
from desktop_app.store.domain.digest import DigestFile, files_of_run
from desktop_app.store.protocol import RUN_STATUSES
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.app_support import answer_dialog, messages, settle, wait_until
from tests.digest_corpus import make_corpus

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user config file and no FLOWDESK_* variables leak into these tests."""
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "no-config.toml"))


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """Three text files and one binary file."""
    src = tmp_path / "notes"
    src.mkdir()
    (src / "a.md").write_text("# Plans\n\nWe ship the digest flow this week.\n")
    (src / "b.txt").write_text("Shopping list: apples, pears and bread.\n")
    (src / "c.py").write_text('"""Tiny module."""\n\n\ndef f():\n    return 1\n')
    (src / "blob.bin").write_bytes(bytes(range(256)) * 4)
    return src


def settings_for(db: Path) -> Settings:
    return load_settings(db_path=db)


async def type_into(pilot: Pilot[None], selector: str, text: str) -> None:
    await pilot.click(selector)
    await pilot.press(*text)


async def start_digest_via_form(pilot: Pilot[None], folder: str, out: str) -> None:
    """Type paths (relative ones resolve against the working directory)."""
    await pilot.press("n")
    assert isinstance(pilot.app.screen, NewDigestScreen)
    await type_into(pilot, "#folder", folder)
    await type_into(pilot, "#out", out)
    await pilot.press("enter")
    await settle(pilot)


def runs_screen(app: FlowdeskApp) -> RunsScreen:
    return app.runs_screen


async def test_first_launch_applies_the_schema_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    app = FlowdeskApp(settings_for(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.startup_error is None
        assert app.schema is not None and app.schema.applied
        applied = [m for m in messages(app) if m.startswith("Applied the schema")]
        assert len(applied) == 1
        n = len(app.schema.applied)
        assert applied[0] == f"Applied the schema ({n} files) to {db}"
        assert "schema applied now" in runs_screen(app).status_line.message
        assert runs_screen(app).table.run_ids == []
        assert not messages(app, "error")
    store = open_store(db)
    try:
        assert store.list_runs() == []
    finally:
        store.close()

    # A second launch finds the schema in place and applies nothing.
    again = FlowdeskApp(settings_for(db))
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert again.schema is not None and again.schema.applied == []
        assert not [m for m in messages(again) if m.startswith("Applied the schema")]


async def test_start_digest_from_the_form(
    tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # short relative paths keep the typing quick
    db, out = tmp_path / "t.db", tmp_path / "out"
    app = FlowdeskApp(settings_for(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await start_digest_via_form(pilot, "notes", "out")
        assert isinstance(app.screen, RunsScreen)
        table = runs_screen(app).table
        assert len(table.run_ids) == 1
        run_id = table.run_ids[0]
        assert table.cell(run_id, "run") == run_id[:8]
        assert table.cell(run_id, "flow") == "digest"
        assert table.cell(run_id, "status") == "completed"
        assert table.cell(run_id, "progress") == "4/4"
        assert any(m.startswith(f"Run {run_id[:8]} completed") for m in messages(app))
        assert not messages(app, "error")
    assert (out / "digest.md").is_file()
    assert "Plans" in (out / "digest.md").read_text()


async def test_actions_are_in_the_command_palette(tmp_path: Path) -> None:
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {
            "New digest run",
            "Open run",
            "Resume run",
            "Answer run",
            "Cancel run",
            "Quit",
        } <= titles
        # the footer's words (c and a show only once a run they apply to is selected)
        keys = {b.key: b.description for b in type(app.screen).BINDINGS}  # type: ignore[union-attr]
        assert keys["c"] == "Cancel" and keys["a"] == "Answer"


async def test_run_detail_lists_steps_and_checkpoints(
    tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "t.db"
    app = FlowdeskApp(settings_for(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await start_digest_via_form(pilot, "notes", "out")
        run_id = runs_screen(app).table.run_ids[0]
        await pilot.press("enter")
        await settle(pilot)  # the history is read in a worker
        screen = app.screen
        assert isinstance(screen, RunDetailScreen) and screen.run_id == run_id
        assert screen.record is not None and screen.record.status == "completed"
        steps = screen.query_one(StepsTable)
        assert [steps.status_of(s) for s in ("scan", "summarize", "report")] == ["completed"] * 3
        checkpoints = screen.query_one(CheckpointsTable)
        history = app.read(lambda s: s.history(run_id))
        assert history is not None
        # The summarize loop's iterations share one timeline row.
        groups = group_history(history)
        assert checkpoints.row_count == len(groups) < len(history)
        assert checkpoints.revisions == [g.last for g in groups]
        loop = [g for g in checkpoints.groups if g.step_id == "summarize"]
        assert (
            len(loop) == 1 and loop[0].count == sum(h.step_id == "summarize" for h in history) > 1
        )
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)


async def test_progress_is_live_while_a_run_works(tmp_path: Path, notes: Path) -> None:
    reached, gate = threading.Event(), threading.Event()

    def on_file(_run_id: str, row: DigestFile) -> None:
        if row.path == "blob.bin":  # the third file: two are committed
            reached.set()
            gate.wait(10)

    flows = [build_digest_flow(on_file=on_file)]
    app = FlowdeskApp(settings_for(tmp_path / "t.db"), flows=flows)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            run_id = app.controller.start_digest(
                DigestInput(folder=str(notes), out=str(tmp_path / "out"))
            )
            assert run_id is not None
            table = runs_screen(app).table
            await wait_until(pilot, lambda: run_id in table.run_ids and reached.is_set())
            await wait_until(pilot, lambda: table.cell(run_id, "progress") == "2/4")
            assert table.cell(run_id, "status") == "running"

            await pilot.press("enter")
            detail = app.screen
            assert isinstance(detail, RunDetailScreen)
            steps = detail.query_one(StepsTable)
            assert steps.status_of("scan") == "completed"
            assert steps.status_of("summarize") == "in_progress"
            before = detail.query_one(CheckpointsTable).row_count

            gate.set()
            await settle(pilot)
            await wait_until(pilot, lambda: steps.status_of("report") == "completed")
            # the checkpoints table refreshes on its own poll (CI: one behind under load)
            checkpoints = detail.query_one(CheckpointsTable)
            await wait_until(pilot, lambda: checkpoints.row_count > before)
            await pilot.press("escape")
            assert table.cell(run_id, "status") == "completed"
            assert table.cell(run_id, "progress") == "4/4"
    finally:
        gate.set()


async def test_quit_mid_run_then_the_next_launch_finishes_it(tmp_path: Path, notes: Path) -> None:
    db, out = tmp_path / "t.db", tmp_path / "out"
    reached, gate = threading.Event(), threading.Event()

    def on_file(_run_id: str, row: DigestFile) -> None:
        if row.path == "blob.bin":
            reached.set()
            gate.wait(10)

    app = FlowdeskApp(settings_for(db), flows=[build_digest_flow(on_file=on_file)])
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            run_id = app.controller.start_digest(DigestInput(folder=str(notes), out=str(out)))
            assert run_id is not None
            assert app.engine is not None
            owner = app.engine.owner
            await wait_until(pilot, reached.is_set)
        # The app is gone; the step in flight cannot commit any more.
    finally:
        gate.set()

    store = open_store(db)
    try:
        run = store.get_run(run_id)
        assert (run.status, run.progress) == ("running", (2, 4))
        # its step was in flight at the quit: the app kept the lease (no other
        # process may run that step while this one might), and its process exits
        assert run.lease_owner == owner
        exited = cli_forkserver.popen([sys.executable, "-c", "pass"])
        exited.wait()  # this test's process goes on: give the lease a pid that exited
        dead = f"{socket.gethostname()}:{exited.pid}:abc123"
        store.write(
            lambda tx: tx.execute("UPDATE runs SET lease_owner=? WHERE run_id=?", (dead, run_id))
        )
    finally:
        store.close()

    again = FlowdeskApp(settings_for(db))
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "Resumed 1 run: 1 completed, 0 failed" in messages(again)
        assert runs_screen(again).table.cell(run_id, "progress") == "4/4"
    store = open_store(db)
    try:
        rows = store.query(files_of_run(run_id))
    finally:
        store.close()
    assert {r.path: r.times_processed for r in rows} == {
        "a.md": 1,
        "b.txt": 1,
        "blob.bin": 1,
        "c.py": 1,
    }
    assert (out / "digest.md").is_file()


async def test_runs_from_another_connection_show_up(tmp_path: Path, notes: Path) -> None:
    db = tmp_path / "t.db"
    app = FlowdeskApp(settings_for(db))
    app.POLL_S = 0.05
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        other = bootstrap.build_engine(settings_for(db))  # like `flowdesk run` elsewhere
        try:
            result = other.run("digest", DigestState(folder=str(notes), out=str(tmp_path / "o")))
        finally:
            other.store.close()
        table = runs_screen(app).table
        await wait_until(pilot, lambda: table.run_ids == [result.run_id])
        assert table.cell(result.run_id, "status") == "completed"


async def test_launch_resumes_an_interrupted_run_and_says_so(tmp_path: Path, notes: Path) -> None:
    db, out = tmp_path / "t.db", tmp_path / "out"
    settings = settings_for(db)
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    run_id = engine.start("digest", DigestState(folder=str(notes), out=str(out)))
    assert engine.store.get_run(run_id).status == "pending"
    engine.store.close()

    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        said = messages(app)
        assert "Resuming 1 interrupted run…" in said
        assert "Resumed 1 run: 1 completed, 0 failed" in said
        assert said.index("Resuming 1 interrupted run…") < said.index(
            "Resumed 1 run: 1 completed, 0 failed"
        )
        table = runs_screen(app).table
        assert table.run_ids == [run_id]
        assert table.cell(run_id, "status") == "completed"
        assert table.cell(run_id, "progress") == "4/4"
        assert "Resumed 1 run" in str(runs_screen(app).status_line.render())
    assert (out / "digest.md").is_file()
    store = open_store(db)
    try:
        assert store.get_run(run_id).status == "completed"
    finally:
        store.close()


async def test_launch_without_recovery_leaves_runs_alone(tmp_path: Path, notes: Path) -> None:
    db, out = tmp_path / "t.db", tmp_path / "out"
    settings = load_settings(db_path=db, recover_on_launch=False)
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    run_id = engine.start("digest", DigestState(folder=str(notes), out=str(out)))
    engine.store.close()

    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert not [m for m in messages(app) if "Resum" in m]
        assert runs_screen(app).table.cell(run_id, "status") == "pending"
        # ...until the user resumes it with r.
        await pilot.press("r")
        await settle(pilot)
        assert runs_screen(app).table.cell(run_id, "status") == "completed"
        assert "r" not in app.screen.active_bindings  # not offered on a completed run
        runs_screen(app).action_resume_run()  # the palette's "Resume run" says why
        assert messages(app)[-1].endswith("is already completed; nothing to resume.")


async def test_missing_folder_is_refused_in_the_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "t.db"
    app = FlowdeskApp(settings_for(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("n")
        await type_into(pilot, "#folder", "no-quiz")  # "q" is text here, not quit
        await pilot.press("enter")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, NewDigestScreen)
        assert "does not exist" in form.error_text
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert app.read(lambda s: s.list_runs()) == []
        assert runs_screen(app).table.run_ids == []


async def test_a_file_that_is_not_sqlite_is_left_untouched(tmp_path: Path) -> None:
    db = tmp_path / "notes.txt"
    db.write_text("not a database\n")
    before = db.read_bytes()
    app = FlowdeskApp(settings_for(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.startup_error is not None
        assert "not a SQLite database" in app.startup_error
        assert app.startup_error in messages(app, "error")
        assert runs_screen(app).banner.has_class("-visible")
        assert "not a SQLite database" in runs_screen(app).banner.message
        await pilot.press("n")  # refused with a notice, not a crash
        assert isinstance(app.screen, RunsScreen)
        assert messages(app, "error")[-1].startswith("The database is not open:")
    assert db.read_bytes() == before
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()


async def test_a_folder_given_as_the_database_gives_a_notice(tmp_path: Path) -> None:
    app = FlowdeskApp(settings_for(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.startup_error is not None and str(tmp_path) in app.startup_error
        assert app.startup_error in messages(app, "error")
        assert runs_screen(app).banner.has_class("-visible")


async def test_a_database_in_a_missing_folder_gives_a_notice(tmp_path: Path) -> None:
    db = tmp_path / "missing" / "t.db"
    app = FlowdeskApp(settings_for(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.startup_error is not None and "does not exist" in app.startup_error
        assert Notice(app.startup_error, "error") in app.notices
    assert not db.parent.exists()


async def test_a_database_in_a_read_only_folder_gives_a_notice(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as root: a read-only mode does not stop writes")
        app = FlowdeskApp(settings_for(folder / "t.db"))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.startup_error is not None
            assert "not writable" in app.startup_error
            assert app.startup_error in messages(app, "error")
            assert runs_screen(app).banner.has_class("-visible")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)


def test_default_output_folder_sits_next_to_the_input(tmp_path: Path) -> None:
    assert default_out(str(tmp_path / "notes")) == str(tmp_path / "notes-digest")
    assert default_out("  ") == ""


# -- columns, selection, status line -----------------------------------------


async def test_status_and_progress_columns_fit_long_values(tmp_path: Path, notes: Path) -> None:
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = runs_screen(app).table
        # Wide enough before any run shows up, for every status a flow run has.
        assert table.column_width("status") >= max(len(s) for s in RUN_STATUSES)
        assert table.column_width("progress") >= len("123456/123456")
        assert MIN_WIDTHS["status"] == len("completed")
        run_id = app.controller.start_digest(
            DigestInput(folder=str(notes), out=str(tmp_path / "out"))
        )
        assert run_id is not None
        # a row that ended shows the progress given (a running one shows its
        # own, with its pace): under a CI run's load the digest could still run
        await wait_until(
            pilot,
            lambda: run_id in table.run_ids and table.cell(run_id, "status") == "completed",
        )
        await settle(pilot)
        table.set_progress(run_id, 27582, 33875)
        assert table.cell(run_id, "progress") == "27582/33875"
        assert table.column_width("progress") >= len("27582/33875")
        table.set_progress(run_id, 1234567, 1234567)  # wider still: the column grows
        await pilot.pause()
        assert table.column_width("progress") >= len("1234567/1234567")
        assert table.cell(run_id, "status") == "completed"


async def test_a_run_started_from_the_form_is_selected(
    tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await start_digest_via_form(pilot, "notes", "out1")
        first = runs_screen(app).table.run_ids[0]
        await start_digest_via_form(pilot, "notes", "out2")
        table = runs_screen(app).table
        newest = table.run_ids[0]
        assert newest != first and table.run_ids == [newest, first]
        assert table.selected_run_id() == newest
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RunDetailScreen) and app.screen.run_id == newest


async def test_the_schema_status_line_goes_away(tmp_path: Path) -> None:
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    app.STATUS_S = 2.0  # long enough to be seen after start-up on a busy machine
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        line = runs_screen(app).status_line
        assert "schema applied now" in line.message
        await wait_until(pilot, lambda: line.message == "")
        assert not line.display
        # The notice stays in the log even though its toast and the line are gone.
        assert any(m.startswith("Applied the schema") for m in messages(app))


# -- return code -------------------------------------------------------------


async def test_quitting_after_a_database_error_returns_1(tmp_path: Path) -> None:
    db = tmp_path / "notes.txt"
    db.write_text("not a database\n")
    app = FlowdeskApp(settings_for(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.startup_error is not None
        await pilot.press("q")
    assert app.return_code == 1


async def test_quitting_normally_returns_0(tmp_path: Path) -> None:
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("q")
    assert app.return_code == 0


# -- waiting runs: cancel and answer -----------------------------------------


class Approval(BaseModel):
    answer: bool | None = None
    done: bool = False


def approve_flow() -> CompiledFlow[Approval]:
    return (
        FlowBuilder("approve", Approval)
        .await_input("ok", "answer", prompt="Ship?")
        .step("ship", lambda s: {"done": True})
        .chain()
        .compile()
    )


class Deploy(BaseModel):
    go: object = None


#: 3 h 12 min 30 s: shown as "in 3h 12m".
SIGNAL_TIMEOUT_S = 3 * 3600 + 12 * 60 + 30


def signal_flow() -> CompiledFlow[Deploy]:
    return (
        FlowBuilder("deploy", Deploy)
        .wait_signal("go", "deploy", "prod", into="go", timeout_s=SIGNAL_TIMEOUT_S)
        .step("after", lambda s: {})
        .chain()
        .compile()
    )


def flows() -> list[CompiledFlow[Any]]:
    return [approve_flow(), signal_flow(), build_digest_flow()]


def waiting_run(settings: Settings, flow: str, state: BaseModel) -> str:
    """A run of ``flow`` left waiting by another process (like ``flowdesk start``)."""
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=flows())
    try:
        result = engine.run(flow, state)
    finally:
        engine.store.close()
    assert result.status == "waiting"
    return result.run_id


def stored_run(db: Path, run_id: str) -> tuple[str, dict[str, Any]]:
    store = open_store(db)
    try:
        return store.get_run(run_id).status, dict(store.latest(run_id).state)
    finally:
        store.close()


async def test_a_waiting_run_is_answered_from_the_app(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    run_id = waiting_run(settings, "approve", Approval())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = runs_screen(app)
        assert screen.table.cell(run_id, "status") == "waiting"
        assert screen.hint.message.startswith("1 run is waiting")
        await pilot.press("a")
        await settle(pilot)
        modal = app.screen
        assert isinstance(modal, AnswerScreen)
        [wait] = modal.waits
        assert (wait.kind, wait.prompt) == ("input", "Ship?")
        assert modal.selected_wait_id == wait.wait_id
        table = modal.query_one("#waits", DataTable)
        row = [c.plain for c in table.get_row(wait.wait_id)]
        assert row == [f"{run_id[:8]}:ok:0", "input", "an answer", "-"]
        assert "Ship?" in str(modal.query_one("#prompt").render())

        # A yes/no question: Yes has focus; typed text goes to the answer field.
        assert isinstance(app.focused, Button) and app.focused.id == "answer-yes"
        modal.query_one("#answer", Input).focus()
        # A value that does not fit the field: the engine's InputError, in the modal.
        await pilot.press(*"maybe", "enter")
        await settle(pilot)
        assert app.screen is modal and isinstance(modal, AnswerScreen)
        assert "does not fit field 'answer'" in modal.error_text
        assert modal.error_text.endswith("nothing was answered, the run still waits")
        assert not modal.query_one("#answer", Input).disabled

        modal.query_one("#answer", Input).value = ""
        await pilot.press(*"yes", "enter")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert screen.table.cell(run_id, "status") == "completed"
        assert screen.hint.message == ""
        assert f"Answered {wait.wait_id}; run {run_id[:8]} goes on." in messages(app)
        assert f"Run {run_id[:8]} completed" in messages(app)
        assert not messages(app, "error")
    status, state = stored_run(db, run_id)
    assert (status, state["answer"], state["done"]) == ("completed", True, True)


async def test_an_answer_given_elsewhere_meanwhile_is_refused_in_the_modal(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    run_id = waiting_run(settings, "approve", Approval())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        modal = await answer_dialog(pilot)
        wait_id = modal.selected_wait_id
        # Someone answers with `flowdesk answer` while the modal is open.
        other = bootstrap.build_engine(settings, flows=flows())
        try:
            assert other.resume_with(run_id, False, wait_id=wait_id).status == "completed"
        finally:
            other.store.close()
        await pilot.press(*"yes", "enter")
        await settle(pilot)
        assert app.screen is modal and isinstance(modal, AnswerScreen)
        assert "already answered" in modal.error_text or "not waiting" in modal.error_text
        # the dialog read the run again: it no longer says the run is waiting
        title = str(modal.query_one("#title", Label).render())
        assert title == f"Run {run_id[:8]} (approve) is completed"
        assert "waits for nothing that can be answered" in str(modal.query_one("#prompt").render())
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)
    status, state = stored_run(db, run_id)
    assert (status, state["answer"]) == ("completed", False)  # the first answer stands


async def test_signal_waits_are_shown_with_a_countdown_but_not_answered(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    run_id = waiting_run(settings, "deploy", Deploy())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        modal = app.screen
        assert isinstance(modal, AnswerScreen)
        [wait] = modal.waits
        row = [c.plain for c in modal.query_one("#waits", DataTable).get_row(wait.wait_id)]
        assert row[1:] == ["signal", "signal deploy (key prod)", "in 3h 12m"]
        prompt = str(modal.query_one("#prompt").render())
        assert "flowdesk signal deploy prod" in prompt
        # no answer's field or buttons for a signal: Send signal… instead
        for control in ("#answer", "#as-json", "#answer-yes", "#answer-no", "#send"):
            widget = modal.query_one(control)
            assert widget.disabled and not widget.display, control
        assert modal.query_one("#send-signal", Button).display
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)
        assert runs_screen(app).table.cell(run_id, "status") == "waiting"


async def test_answer_on_a_run_that_is_not_waiting_says_so(tmp_path: Path, notes: Path) -> None:
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        run_id = app.controller.start_digest(
            DigestInput(folder=str(notes), out=str(tmp_path / "out"))
        )
        await settle(pilot)
        # a is not offered on a completed run; the palette's "Answer run" says why
        assert "a" not in app.screen.active_bindings
        runs_screen(app).action_answer_run()
        assert isinstance(app.screen, RunsScreen)
        assert messages(app, "warning")[-1] == (
            f"Run {str(run_id)[:8]} is completed, not waiting; nothing to answer."
        )


async def test_cancel_asks_first_then_cancels(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    run_id = waiting_run(settings, "approve", Approval())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # keep it
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert runs_screen(app).table.cell(run_id, "status") == "waiting"

        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert runs_screen(app).table.cell(run_id, "status") == "canceled"
        assert f"Run {run_id[:8]} is canceled." in messages(app)
        assert not messages(app, "error")

        assert "c" not in app.screen.active_bindings  # not offered on a canceled run
        runs_screen(app).action_cancel_run()  # the palette's: refused at once, no question
        assert isinstance(app.screen, RunsScreen)
        assert messages(app, "error")[-1] == (
            f"Run {run_id[:8]} is already canceled; nothing to cancel."
        )
    assert stored_run(db, run_id)[0] == "canceled"


async def test_cancel_refused_by_the_engine_is_a_notice(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    run_id = waiting_run(settings, "approve", Approval())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        # The run completes elsewhere while the question is open.
        other = bootstrap.build_engine(settings, flows=flows())
        try:
            other.resume_with(run_id, True)
        finally:
            other.store.close()
        await pilot.press("y")
        await settle(pilot)
        errors = messages(app, "error")
        assert errors and errors[-1].startswith(f"Run {run_id[:8]} was not canceled:")
        assert "already completed" in errors[-1]
    assert stored_run(db, run_id)[0] == "completed"


async def test_cancel_stops_a_run_the_app_is_driving(tmp_path: Path, notes: Path) -> None:
    reached, gate = threading.Event(), threading.Event()

    def on_file(_run_id: str, row: DigestFile) -> None:
        if row.path == "blob.bin":
            reached.set()
            gate.wait(10)

    db = tmp_path / "t.db"
    app = FlowdeskApp(settings_for(db), flows=[build_digest_flow(on_file=on_file)])
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            run_id = app.controller.start_digest(
                DigestInput(folder=str(notes), out=str(tmp_path / "out"))
            )
            assert run_id is not None
            await wait_until(pilot, reached.is_set)
            await wait_until(pilot, lambda: run_id in runs_screen(app).table.run_ids)
            await pilot.press("c")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")
            await wait_until(pilot, lambda: f"Run {run_id[:8]} is canceled." in messages(app))
            gate.set()
            await settle(pilot)
            assert runs_screen(app).table.cell(run_id, "status") == "canceled"
            assert [m for m in messages(app) if "canceled" in m] == [
                f"Run {run_id[:8]} is canceled."
            ]
    finally:
        gate.set()
    assert stored_run(db, run_id)[0] == "canceled"
    assert not (tmp_path / "out" / "digest.md").exists()


def test_countdown_text() -> None:
    now = 1_000_000.0
    assert countdown(None, now) == "-"
    assert countdown(now + 3 * 3600 + 12 * 60 + 5, now) == "in 3h 12m"
    assert countdown(now + 2 * 86400 + 3600, now) == "in 2d 1h"
    assert countdown(now + 250, now) == "in 4m 10s"
    assert countdown(now + 0.2, now) == "in 1s"
    assert countdown(now, now) == "expired"
    assert countdown(now - 60, now) == "expired"


# -- live progress is throttled -----------------------------------------------


async def test_progress_refreshes_are_throttled_and_the_last_value_lands(tmp_path: Path) -> None:
    """Live progress goes through the app's RefreshThrottle (its spacing is
    tested on an injected clock in test_app_progress.py); here: the refreshes
    went through it and the final value lands."""
    src = tmp_path / "many"
    src.mkdir()
    n = len(make_corpus(src, 400))
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        run_id = app.controller.start_digest(
            DigestInput(folder=str(src), out=str(tmp_path / "out"))
        )
        assert run_id is not None
        await settle(pilot)
        table = runs_screen(app).table
        await wait_until(pilot, lambda: table.cell(run_id, "progress") == f"{n}/{n}")
        assert table.cell(run_id, "status") == "completed"
    assert app.throttle.flushes, "progress was never shown"


async def test_resume_on_a_run_waiting_for_an_answer_points_to_answer(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "t.db")
    run_id = waiting_run(settings, "approve", Approval())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        assert messages(app)[-1] == f"Run {run_id[:8]} waits for an answer; press a to answer it."
        assert not messages(app, "error")


async def test_launch_recovery_policy_per_flow_ask_and_off(tmp_path: Path, notes: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    run_id = engine.start("digest", DigestState(folder=str(notes), out=str(tmp_path / "o")))
    engine.store.close()
    for policy, hint in (("ask", "1 interrupted run of digest waits for you: "), ("off", None)):
        chosen = load_settings(db_path=db, recovery={"digest": policy})
        app = FlowdeskApp(chosen)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            said = messages(app)
            assert not any(m.startswith("Resuming") for m in said)
            if hint:
                assert any(hint in m for m in said), said
        store = open_store(db)
        try:
            assert store.get_run(run_id).status == "pending"  # left for the user
        finally:
            store.close()


async def test_launch_recovery_shows_progress(tmp_path: Path, notes: Path, monkeypatch) -> None:
    from desktop_app.app.widgets.banner import StatusLine

    db = tmp_path / "t.db"
    settings = settings_for(db)
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    for i in range(2):
        engine.start("digest", DigestState(folder=str(notes), out=str(tmp_path / f"o{i}")))
    engine.store.close()
    said: list[str] = []
    original = StatusLine.say

    def spy(self, message, *, for_s=None):
        said.append(message)
        return original(self, message, for_s=for_s)

    monkeypatch.setattr(StatusLine, "say", spy)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
    progress = [m for m in said if m.startswith("Resuming interrupted runs:")]
    assert progress == [
        "Resuming interrupted runs: 1 of 2 done…",
        "Resuming interrupted runs: 2 of 2 done…",
    ]
    assert said.index(progress[-1]) < said.index("Resumed 2 runs: 2 completed, 0 failed")


class _Crash(BaseException):
    """Stands in for the process dying inside a step (not an Exception, so no
    retry or failure is recorded: the step stays ``in_progress``)."""


async def test_starting_a_digest_again_resumes_the_interrupted_run_of_that_input(
    tmp_path: Path, notes: Path
) -> None:
    from desktop_app.flow import Engine
    from desktop_app.flows import builtin_flow_key

    db, out = tmp_path / "t.db", tmp_path / "out"
    assert bootstrap.apply_schema(settings_for(db)).applied
    seen: list[str] = []

    def crash_at_third(_run_id: str, row: DigestFile) -> None:
        seen.append(row.path)
        if len(seen) == 3:
            raise _Crash

    store = open_store(db)
    key = builtin_flow_key("digest", {"folder": str(notes), "out": str(out)})
    with pytest.raises(_Crash):
        Engine(store, flows=[build_digest_flow(on_file=crash_at_third)]).run(
            "digest", DigestState(folder=str(notes), out=str(out)), flow_key=key
        )
    (interrupted,) = store.list_runs()
    assert interrupted.status == "running"
    store.close()

    app = FlowdeskApp(settings_for(db).model_copy(update={"recover_on_launch": False}))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        run_id = app.controller.start_digest(DigestInput(folder=str(notes), out=str(out)))
        assert run_id == interrupted.run_id  # the same run, not a second one
        await wait_until(pilot, lambda: not app.controller.is_driving(run_id), timeout=20)
        await settle(pilot)
    store = open_store(db)
    try:
        assert [(r.run_id, r.status) for r in store.list_runs()] == [
            (interrupted.run_id, "completed")
        ]
    finally:
        store.close()


async def test_a_digest_folder_gone_after_the_dialog_checked_it_is_said_and_nothing_starts(
    tmp_path: Path,
) -> None:
    settings = settings_for(tmp_path / "t.db").model_copy(update={"recover_on_launch": False})
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        gone = DigestInput(folder=str(tmp_path / "gone"), out=str(tmp_path / "out"))
        app.controller._digest_chosen(gone)  # what the dialog hands over
        await settle(pilot)
        assert any("does not exist" in m for m in messages(app, "error")), messages(app)
    store = open_store(tmp_path / "t.db")
    try:
        assert store.list_runs() == []
    finally:
        store.close()


async def test_starting_a_digest_again_resumes_the_failed_run_of_that_input(
    tmp_path: Path, notes: Path
) -> None:
    """As ``flowdesk run digest``: a failed run of the same folder and output
    is resumed, not named "started" under an id no run has (the app listed
    only pending and running runs as twins; the engine then answered with
    the failed run, unresumed)."""
    from desktop_app.flows import builtin_flow_key

    db, out = tmp_path / "t.db", tmp_path / "out"
    settings = settings_for(db).model_copy(update={"recover_on_launch": False})
    assert bootstrap.apply_schema(settings).applied
    sv = bootstrap.open_services(settings)
    given = {"folder": str(notes), "out": str(out)}
    failed = sv.engine.start("digest", given, flow_key=builtin_flow_key("digest", given))
    sv.engine.fail_run(failed, "the disk was full")
    sv.close()

    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        run_id = app.controller.start_digest(DigestInput(folder=str(notes), out=str(out)))
        assert run_id == failed
        await wait_until(pilot, lambda: not app.controller.is_driving(run_id), timeout=20)
        await settle(pilot)
        assert f"Resuming the failed digest run {failed[:8]} on this input" in messages(app)
    store = open_store(db)
    try:
        assert [(r.run_id, r.status) for r in store.list_runs()] == [(failed, "completed")]
    finally:
        store.close()


async def test_the_answer_dialog_of_a_run_whose_waits_cannot_be_read_says_so(
    tmp_path: Path,
) -> None:
    """A read of what the run waits for that fails (a server away, a damaged
    checkpoint; here its row's checksum no longer matches) is said as such:
    a tryout's dialog said the run "waits for nothing that can be answered
    here (no question is pending)" while the server was down."""
    import sqlite3

    db = tmp_path / "t.db"
    settings = settings_for(db)
    waiting_run(settings, "approve", Approval())
    with sqlite3.connect(db) as lite:
        lite.execute(
            "UPDATE checkpoints SET checksum='0' WHERE rowid=(SELECT max(rowid) FROM checkpoints)"
        )
    lite.close()
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        modal = await answer_dialog(pilot)
        prompt = str(modal.query_one("#prompt").render())
        assert "no question is pending" not in prompt, prompt
        assert prompt.startswith("What this run waits for cannot be read now: "), prompt
        assert prompt.endswith("Nothing was answered."), prompt
