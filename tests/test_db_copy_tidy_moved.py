"""A tidy whose moves were still queued when ``db copy`` moved them to
PostgreSQL (a team tryout: ``answer RUN yes`` killed mid-delivery, then the
file copied). The file's ``runs`` said ``-1 moves queued · 1 move being made
now by dispatcher moved to postgresql://…`` and its ``show`` "1 being moved
now (by a live process)": the move that was mid-send when its process died
was counted as made by a live dispatcher named "moved to …". And ``undo``
on the file moved back the files PostgreSQL's dispatcher had moved, then
printed an ``undo`` that failed the same way for ever. The file now counts
that move with the others it moved, and refuses ``undo`` with the command
that undoes the run where its moves are made; run as printed, it works.
There, ``show`` says a worker makes them (the app does not on PostgreSQL)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.flows.tidy import build_tidy_flow
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import as_printed, flowdesk
from tests.tidy_folders import fill, top_files

pytestmark = pytest.mark.postgres

DEAD = "gone.example:999999:dead0"  # a claimant on another host, its claim run out


def approved_tidy(tmp_path: Path, n: int) -> tuple[Path, Path, dict[str, str], str]:
    """A file with a tidy of ``n`` files approved, its moves queued and none
    made (no dispatcher ran): ``(db, folder, its files, run id)``."""
    db, folder = tmp_path / "lap.db", tmp_path / "dl"
    files = fill(folder, n)
    assert flowdesk(db, "db", "apply").returncode == 0
    store = open_store(db)
    try:
        engine = Engine(store, flows=[build_tidy_flow()])
        run_id = engine.run("tidy", {"folder": str(folder)}).run_id
        assert engine.resume_with(run_id, "yes").status == "completed"
    finally:
        store.close()
    return db, folder, files, run_id


@pytest.mark.scenario("S120")
def test_a_tidy_copied_mid_delivery_counts_its_moves_moved_and_undo_points_there(
    tmp_path: Path, pg_url: str
) -> None:
    db, folder, files, run_id = approved_tidy(tmp_path, 12)
    store = open_store(db)
    try:
        (first, *_) = sorted(store.open_intents(run_id), key=lambda i: i.intent_id)
        # the process delivering the moves died inside this one's send
        store.conn.execute(
            "UPDATE outbox SET status='sending', attempts=1, claimed_by=?, "
            "claim_expires_at=? WHERE intent_id=?",
            (DEAD, store.now() - 60.0, first.intent_id),
        )
        assert len(store.open_intents(run_id)) == 12
    finally:
        store.close()

    said = flowdesk(db, "show", run_id).stdout  # the app delivers them on the file
    assert "a running flowdesk agent or the app does on its own" in said, said

    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url)
    assert copied.returncode == 0, copied.stderr
    assert "marked 12 queued side effects" in copied.stdout, copied.stdout

    line = next(x for x in flowdesk(db, "runs").stdout.splitlines() if x.startswith(run_id))
    assert "completed" in line, line
    assert "· -" not in line and "being made" not in line and "queued" not in line, line
    shown = flowdesk(db, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "being moved now" not in shown.stdout and "being made" not in shown.stdout
    assert "moved to postgresql://" in shown.stdout, shown.stdout

    said = flowdesk(pg_url, "show", run_id).stdout  # on PostgreSQL the workers alone do
    assert "as a running flowdesk agent does on its own" in said, said

    undone = flowdesk(db, "undo", run_id)
    assert undone.returncode == 1, undone.stdout + undone.stderr
    assert top_files(folder) == files  # nothing moved back, nothing withdrawn here
    said = undone.stderr.strip().splitlines()
    assert said[0] == (
        f"flowdesk: run {run_id}'s queued moves were moved to {pg_url} by flowdesk db copy: "
        "a dispatcher there makes them, so it is undone there; nothing was moved back or "
        "withdrawn here"
    ), said
    hint = said[1]
    assert hint.startswith("undo it there: "), hint
    there = as_printed(hint.removeprefix("undo it there: "), env=dict(os.environ))
    assert there.returncode == 0, there.stdout + there.stderr
    assert top_files(folder) == files  # no move was made there either: all withdrawn
    again = flowdesk(db, "undo", run_id)  # the file's answer stays the same
    assert again.returncode == 1 and again.stderr.splitlines()[:2] == said[:2]


async def test_the_app_on_the_file_refuses_the_undo_with_the_command_that_works_there(
    tmp_path: Path, pg_url: str
) -> None:
    """The app's `u` on that run said why it would not undo it, but not the
    command that undoes it (a tryout); it names it, and as printed it runs."""
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings
    from tests.app_support import messages, settle

    db, folder, files, run_id = approved_tidy(tmp_path, 5)
    assert flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url).returncode == 0

    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        app.controller.open_run(run_id)
        await settle(pilot)
        await pilot.press("u")
        await settle(pilot)
        (said,) = [m for m in messages(app) if "undo it there: " in m]
    assert said.startswith(f"run {run_id}'s queued moves were moved to {pg_url} by flowdesk db")
    hint = said.split("undo it there: ", 1)[1]
    assert hint == f"flowdesk --db {pg_url} undo {run_id}"
    there = as_printed(hint, env=dict(os.environ))
    assert there.returncode == 0, there.stdout + there.stderr
    assert top_files(folder) == files  # nothing moved anywhere: all withdrawn there
