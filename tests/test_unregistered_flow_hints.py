"""A waiting run whose flow is not registered in this process: ``show``
says so and how to register it instead of offering commands that fail
bare, ``resume`` and ``answer`` refuse with the same advice, and every
command printed runs as printed (with the user's ``--db`` and ``--scope``;
the run's commands once ``FLOWDESK_FLOWS`` registers the flow, as the
advice says). The app's header names the scope it shows. Real processes,
a real SQLite file."""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime
from pathlib import Path

from desktop_app.app.main import FlowdeskApp
from desktop_app.config import load_settings
from tests.app_support import messages, open_inbox, settle, wait_until
from tests.cli_support import as_printed, flowdesk
from tests.polling import until
from tests.timer_flows import FLOWS_ENV

REGISTERED = {"FLOWDESK_FLOWS": FLOWS_ENV}


def bare() -> dict[str, str]:
    """This environment with no flows of the user's registered."""
    return {k: v for k, v in os.environ.items() if k != "FLOWDESK_FLOWS"}


def line_after(stream: str, label: str) -> str:
    found = re.search(rf"{re.escape(label)}: (flowdesk [^\n`]*)", stream)
    assert found, stream
    return found.group(1).strip()


def start(db: Path, flow: str) -> str:
    out = flowdesk(
        db, "--scope", "team", "start", flow, "--input", json.dumps({"order": "z3"}),
        env=REGISTERED,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[0]


def test_a_sleeping_run_of_an_unregistered_flow_says_how_to_register_it(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = start(db, "napper")
    shown = as_printed(f"flowdesk --db {db} --scope team show {run_id}", bare())
    assert shown.returncode == 0, shown.stderr
    assert (
        "waiting: its flow 'napper' is not registered here, so no process configured like this "
        "one resumes it: set FLOWDESK_FLOWS (the flows setting)"
    ) in shown.stdout
    assert "only a `flowdesk agent` or an app that registers flow 'napper' fires it" in (
        shown.stdout
    )
    assert "a running `flowdesk agent` or the app fires it on its own" not in shown.stdout
    fire = line_after(shown.stdout, "fire it once due with")
    assert fire == f"flowdesk --db {db} --scope team resume {run_id}"
    refused = as_printed(fire, bare())  # as printed, without registering: refused, and why
    assert refused.returncode == 2
    assert f"run {run_id} cannot be resumed here: its flow 'napper' is not registered" in (
        refused.stderr
    )
    again = re.search(r"`(flowdesk [^`]*)` says what it waits for", refused.stderr)
    assert again, refused.stderr
    assert as_printed(again.group(1), bare()).returncode == 0
    assert "status waiting" in as_printed(again.group(1), bare()).stdout
    # registered, as the advice says: the printed command fires the timer once due
    waits = json.loads(
        as_printed(f"flowdesk --db {db} --scope team show {run_id} -o json", bare()).stdout
    )["waits"]
    due = waits[0]["deadline_at"]
    at = datetime.fromisoformat(due.replace("Z", "+00:00")).timestamp()
    until(lambda: time.time() > at + 0.1, "the timer to fall due")
    fired = as_printed(fire, {**bare(), **REGISTERED})
    assert fired.returncode == 0, fired.stderr
    assert f"run {run_id} completed" in fired.stdout


def test_a_question_of_an_unregistered_flow_is_answered_once_registered(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = start(db, "approver")
    shown = as_printed(f"flowdesk --db {db} --scope team show {run_id}", bare())
    assert "waiting: its flow 'approver' is not registered here" in shown.stdout
    answer = line_after(shown.stdout, "answer with")
    assert answer == f"flowdesk --db {db} --scope team answer {run_id} yes --wait-id approve:0"
    refused = as_printed(answer, bare())
    assert refused.returncode == 2
    assert f"run {run_id} cannot be answered here: its flow 'approver'" in refused.stderr
    answered = as_printed(answer, {**bare(), **REGISTERED})
    assert answered.returncode == 0, answered.stderr
    assert f"run {run_id} completed" in answered.stdout


def test_waiting_says_first_that_the_flow_is_not_registered_and_show_claims_no_answers(
    tmp_path: Path,
) -> None:
    """A tryout: ``waiting`` listed a question of an unregistered flow as if
    it could be answered (only ``show`` said what to set first), and
    ``show``'s answer line said "yes, no or any text" for a question that
    takes yes or no only (what it takes is not known without the flow).
    ``waiting`` (text and JSON) now says first what to set; ``show`` does
    not guess the answers; registered, both are as before."""
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = start(db, "approver")
    listed = as_printed(f"flowdesk --db {db} --scope team waiting", bare())
    assert listed.returncode == 0, listed.stderr
    first = (
        "  first: its flow 'approver' is not registered here, so no process configured like "
        "this one resumes it: set FLOWDESK_FLOWS (the flows setting)"
    )
    lines = listed.stdout.splitlines()
    at = lines.index(f"run {run_id}  flow approver")
    assert lines[at + 1].startswith(first), listed.stdout
    # `waiting` lists no commands: the hint points at `show`, run as printed
    hint = lines[at + 1].split("; then `", 1)[1]
    assert hint == f"flowdesk --db {db} --scope team show {run_id}` says what moves it on"
    shown_there = as_printed(hint.split("`", 1)[0], {**bare(), **REGISTERED})
    assert shown_there.returncode == 0, shown_there.stderr
    assert f"flowdesk --db {db} --scope team answer {run_id}" in shown_there.stdout
    rows = json.loads(as_printed(f"flowdesk --db {db} --scope team waiting -o json", bare()).stdout)
    (row,) = [r for r in rows if r["run_id"] == run_id]
    assert row["first"].startswith("its flow 'approver' is not registered here")
    shown = as_printed(f"flowdesk --db {db} --scope team show {run_id}", bare())
    assert "yes, no or any text" not in shown.stdout
    assert (
        "the word after the run id is the answer: which answers it takes is known where its "
        "flow is registered (see above)"
    ) in shown.stdout
    registered = {**bare(), **REGISTERED}
    listed = as_printed(f"flowdesk --db {db} --scope team waiting", registered)
    assert "first:" not in listed.stdout
    rows = json.loads(
        as_printed(f"flowdesk --db {db} --scope team waiting -o json", registered).stdout
    )
    assert all("first" not in r for r in rows if r.get("run_id") == run_id)
    shown = as_printed(f"flowdesk --db {db} --scope team show {run_id}", registered)
    assert "which answers it takes is known" not in shown.stdout


async def test_the_header_names_the_scope_shown(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    app = FlowdeskApp(load_settings(db_path=db, scope="team"))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert app.sub_title == f"{db} — scope team"
    plain = FlowdeskApp(load_settings(db_path=db))
    async with plain.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert plain.sub_title == str(db)


async def test_an_answer_in_the_app_to_a_run_of_an_unregistered_flow_says_what_to_set(
    tmp_path: Path,
) -> None:
    """A tryout: y in the inbox on a question whose flow the app does not
    register said only "no flow named 'approver' is registered (known:
    digest, tidy)". The app says the answer was not taken, that nothing
    changed, and what to set (then relaunch); the run still waits."""
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = start(db, "approver")
    app = FlowdeskApp(load_settings(db_path=db, scope="team"))
    async with app.run_test(size=(120, 35)) as pilot:
        await open_inbox(pilot)
        await pilot.press("y")
        await settle(pilot)
        if app.screen.query("#answer-yes"):  # the answer dialog: Yes has focus
            await pilot.press("enter")
        said = f"Run {run_id[:8]} was not answered here: no flow named 'approver' is registered"
        await wait_until(pilot, lambda: any(said in m for m in messages(app)))
        (notice,) = [m for m in messages(app) if said in m]
        assert "Nothing changed. Set FLOWDESK_FLOWS (the flows setting)" in notice
        assert "and relaunch the app, or answer it where its flow is registered." in notice
    shown = as_printed(f"flowdesk --db {db} --scope team show {run_id}", bare())
    assert "status waiting" in shown.stdout


async def test_a_resume_in_the_app_of_a_run_of_an_unregistered_flow_says_what_to_set(
    tmp_path: Path,
) -> None:
    """r on the runs table for a run whose flow the app does not register:
    the notice says the run was not resumed, that nothing changed, and what
    to set; the run still waits."""
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = start(db, "napper")
    app = FlowdeskApp(load_settings(db_path=db, scope="team"))
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.runs_screen.table.selected_run_id() == run_id)
        await pilot.press("r")
        said = f"Run {run_id[:8]} was not resumed here: no flow named 'napper' is registered"
        await wait_until(pilot, lambda: any(said in m for m in messages(app)))
        (notice,) = [m for m in messages(app) if said in m]
        assert "Nothing changed. Set FLOWDESK_FLOWS (the flows setting)" in notice
        assert "and relaunch the app, or resume it where its flow is registered." in notice
    shown = as_printed(f"flowdesk --db {db} --scope team show {run_id}", bare())
    assert "status waiting" in shown.stdout


def test_a_flow_whose_module_fails_to_load_is_named_as_the_likely_cause(tmp_path: Path) -> None:
    """FLOWDESK_FLOWS names the run's flow module, but it raises at import:
    ``show`` names the entry that failed (the warning above says why)
    instead of telling the user to set FLOWDESK_FLOWS, which is set (a
    tryout's). Its advice to fix it runs as given: with the module fixed,
    the same command resumes the run."""
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = start(db, "napper")
    pkg = tmp_path / "code"
    pkg.mkdir()
    (pkg / "myflows.py").write_text("raise RuntimeError('a typo in my flows')\n")
    env = {**bare(), "PYTHONPATH": str(pkg), "FLOWDESK_FLOWS": '["myflows:FLOWS"]'}
    shown = flowdesk(db, "--scope", "team", "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "a typo in my flows" in shown.stderr  # the warning: the real cause
    assert (
        "waiting: its flow 'napper' is not registered here: the flows setting names flow "
        "'myflows:FLOWS', which failed to load (the warning above says why); if its flow is "
        "among them, fix that"
    ) in shown.stdout, shown.stdout
    assert "set FLOWDESK_FLOWS (the flows setting) to the module" not in shown.stdout
    (pkg / "myflows.py").write_text("from tests.timer_flows import napper as FLOWS\n")
    fixed = flowdesk(db, "--scope", "team", "show", run_id, env=env)
    assert fixed.returncode == 0 and "not registered" not in fixed.stdout, fixed.stdout
