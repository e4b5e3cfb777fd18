"""``tidy`` as a new user meets it in the app and the CLI: the start form
keeps the CLI's single-flight rule, a read-only folder is refused before
anything is planned, and the plan table lists reasons in full under a
heading that counts what it lists. Real files, real SQLite, the real
``flowdesk`` command in subprocesses."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Select

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.start_flow import StartFlowScreen
from desktop_app.config import load_settings
from desktop_app.errors import FolderNotWritableError
from desktop_app.flows import builtin_flow_key
from desktop_app.flows.tidy import check_folder
from desktop_app.store.domain.tidy import moves_of_run
from tests.app_support import messages, settle, wait_until
from tests.cli_support import flowdesk

SIZE = (120, 40)
LINKED = "a symbolic link in the folder points at it; moving it would break the link"


def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FlowdeskApp:
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    config = tmp_path / "no-config.toml"
    config.write_text("")  # no settings (the CLI refuses a FLOWDESK_CONFIG naming no file)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    return FlowdeskApp(settings)


async def start_tidy_from_the_form(app: FlowdeskApp, pilot, folder: Path) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("s")
    await settle(pilot)
    form = app.screen
    assert isinstance(form, StartFlowScreen)
    form.query_one("#flow", Select).value = "tidy"
    await settle(pilot)
    form.query_one("#field-folder", Input).value = str(folder)
    await pilot.click("#start")
    await settle(pilot)


def tidy_runs(app: FlowdeskApp) -> list:  # type: ignore[type-arg]
    return app.read(lambda s: s.list_runs(flow_name="tidy")) or []


async def plan_table(app: FlowdeskApp, pilot, folder: Path):  # type: ignore[no-untyped-def]
    """Start a tidy of ``folder`` from the form, open its question: the run,
    the answer dialog and its plan table once the preview is in."""
    await start_tidy_from_the_form(app, pilot, folder)
    await wait_until(pilot, lambda: [r.status for r in tidy_runs(app)] == ["waiting"])
    (run,) = tidy_runs(app)
    app.controller.answer(run)
    await settle(pilot)
    dialog = app.screen
    assert isinstance(dialog, AnswerScreen)
    await wait_until(pilot, lambda: dialog.preview is not None)
    await settle(pilot)
    return run, dialog, dialog.query_one("#preview", DataTable)


async def every_line(pilot, table: DataTable) -> list[str]:  # type: ignore[no-untyped-def,type-arg]
    """The table's lines as shown, every one of them on screen."""
    table.styles.max_height = 100
    await settle(pilot)
    return ["".join(seg.text for seg in table.render_line(y)) for y in range(table.size.height)]


async def test_the_start_form_joins_the_waiting_tidy_of_the_same_folder_as_the_cli_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "dl"
    folder.mkdir()
    for name in ("a.jpg", "b.pdf", "c.txt"):
        (folder / name).write_text(name)
    app = isolated(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await start_tidy_from_the_form(app, pilot, folder)
        await wait_until(pilot, lambda: [r.status for r in tidy_runs(app)] == ["waiting"])
        await start_tidy_from_the_form(app, pilot, folder / ".")  # same folder, spelt otherwise
        await settle(pilot)
        (run,) = tidy_runs(app)  # one run, not two
        assert run.flow_key == builtin_flow_key("tidy", {"folder": str(folder)})
        assert any("waiting already" in m for m in messages(app)), messages(app)
        assert not messages(app, "error")
        run_id = run.run_id
    # the CLI finds the app's run by the same key
    again = flowdesk(tmp_path / "t.db", "run", "tidy", "--folder", str(folder))
    assert again.stdout.splitlines()[0] == run_id
    assert f"run {run_id} on this input is waiting already" in again.stderr
    answered = flowdesk(tmp_path / "t.db", "answer", run_id, "yes")
    assert answered.returncode == 0, answered.stderr
    assert "3 outbox intents delivered" in answered.stdout
    moved = sorted(p.name for p in folder.rglob("*") if p.is_file() and p.parent != folder)
    assert moved == ["a.jpg", "b.pdf", "c.txt"]  # each file moved once


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder on a read-only bind mount (root ignores chmod), with a file."""
    source, mounted = tmp_path / "src", tmp_path / "ro"
    source.mkdir()
    mounted.mkdir()
    (source / "a.jpg").write_text("a")
    binds = [
        ["mount", "--bind", str(source), str(mounted)],
        ["mount", "-o", "remount,ro,bind", str(mounted)],
    ]
    for argv in binds:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            if os.environ.get("CI") == "true" or os.geteuid() == 0:
                pytest.fail(f"a read-only bind mount is needed: {done.stderr}")
            os.chmod(source, 0o555)  # not root: permissions do stop writes
            yield source
            os.chmod(source, 0o755)
            return
    try:
        yield mounted
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


def test_a_read_only_folder_is_refused_before_anything_is_planned(
    tmp_path: Path, read_only_folder: Path
) -> None:
    with pytest.raises(FolderNotWritableError, match="choose a folder you can write to"):
        check_folder(read_only_folder)
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    refused = flowdesk(db, "run", "tidy", "--folder", str(read_only_folder))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stdout == ""  # no run id: no run exists
    assert "read-only file system" in refused.stderr and "nothing was planned" in refused.stderr
    assert "Errno" not in refused.stderr and "Traceback" not in refused.stderr
    assert flowdesk(db, "runs").stdout.strip() == "no runs"
    assert (read_only_folder / "a.jpg").read_text() == "a"


async def test_the_start_form_says_a_read_only_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_only_folder: Path
) -> None:
    app = isolated(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await start_tidy_from_the_form(app, pilot, read_only_folder)
        form = app.screen
        assert isinstance(form, StartFlowScreen)  # still open, saying why
        assert "read-only file system" in str(form.query_one("#form-error").render())
        assert tidy_runs(app) == []


async def test_the_plan_table_lists_reasons_in_full_and_counts_what_it_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "dl"
    folder.mkdir()
    for name in ("a.jpg", "b.pdf", "c.txt", "d.mp3", "kept.pdf", "song.part"):
        (folder / name).write_text(name)
    (folder / "link-to-kept").symlink_to(folder / "kept.pdf")
    app = isolated(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        run, dialog, table = await plan_table(app, pilot, folder)
        assert table.row_count == 6
        title = str(dialog.query_one("#preview-title").render())
        assert "6 files: 4 to move, 2 stay" in title, title
        lines = await every_line(pilot, table)
        assert max(len(line.rstrip()) for line in lines) <= dialog.size.width
        shown = " ".join(" ".join(lines).replace("│", " ").split())
        wanted = f"stays: {LINKED}".split()
        at = 0
        for word in shown.split():  # the reason's words, in order, on screen
            if at < len(wanted) and word == wanted[at]:
                at += 1
        assert at == len(wanted), shown
        rows = app.read(lambda s: s.query(moves_of_run(run.run_id))) or []
        assert sum(m.dst is not None for m in rows) == 4


async def test_the_plan_table_shows_a_name_with_a_newline_on_one_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose name holds a newline (tidy refuses it) is one row of the
    plan table, its name escaped as ``flowdesk show`` prints it; shown raw,
    the name's second line looked like a row of its own."""
    folder = tmp_path / "dl"
    folder.mkdir()
    (folder / "new\n  secret.txt").write_text("x")
    (folder / "plain.txt").write_text("p")
    app = isolated(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        _run, _dialog, table = await plan_table(app, pilot, folder)
        names = sorted(str(table.get_row_at(i)[0]) for i in range(table.row_count))
        assert names == ["new\\n  secret.txt", "plain.txt"]
        lines = await every_line(pilot, table)
        assert not any(line.lstrip("│ ").startswith("secret.txt") for line in lines), lines
    assert (folder / "new\n  secret.txt").exists()
