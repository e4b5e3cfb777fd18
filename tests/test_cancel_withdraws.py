"""A cancel takes back the side effects its run queued and never made.

A new user's report: ``run tidy --new`` over a tidy interrupted with 596
moves queued left them live; ``resume --all`` then made them, the new run
claimed the same files, and both runs' ``show`` and ``undo`` were wrong. A
second tidy of a folder whose moves were still queued double-counted the
same way. Now ``Engine.cancel`` withdraws the run's undelivered outbox
intents, the tidy rows say so, and a tidy does not plan a file another run
has a queued move for. Real SQLite files, real ``flowdesk`` processes, a
real Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.outbox import Dispatcher
from desktop_app.flows import builtin_destinations
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.cli_support import REPO, as_printed, default_sigint, flowdesk
from tests.tidy_folders import fill, tidied, top_files


def undelivered(db: Path, run_id: str) -> int:
    store = open_store(db)
    try:
        return store.undelivered_intents().get(run_id, 0)
    finally:
        store.close()


def interrupted_tidy(db: Path, folder: Path, at_least: int) -> tuple[str, int]:
    """``run tidy`` then ``answer RUN yes``, Ctrl-C once ``at_least`` moves
    are queued (mid-way through the apply loop, none made yet); the run id
    and how many moves it left queued."""
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    run_id = started.stdout.splitlines()[0]
    assert started.stdout.splitlines()[-1] == f"run {run_id} waiting", started.stderr
    cmd = [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "answer", run_id, "yes"]
    answer = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        preexec_fn=default_sigint,
    )
    try:
        while undelivered(db, run_id) < at_least:
            assert answer.poll() is None, answer.communicate()
            time.sleep(0.05)
        answer.send_signal(signal.SIGINT)
        _out, err = answer.communicate(timeout=60)
    finally:
        if answer.poll() is None:
            answer.kill()
            answer.communicate()
    assert answer.returncode == 130, err
    queued = undelivered(db, run_id)
    line = next(x for x in flowdesk(db, "runs").stdout.splitlines() if x.startswith(run_id))
    assert "interrupted" in line and line.endswith(f"· {queued:,} moves queued"), line
    return run_id, queued


@pytest.mark.slow
def test_new_over_a_tidy_with_queued_moves_withdraws_them(tmp_path):
    """(a) The report's exact commands: the replaced run's queued moves are
    never made; every file moves once, by the new run; ``show`` and
    ``undo`` of both runs say so."""
    db, folder = tmp_path / "c.db", tmp_path / "tidy8"
    files = fill(folder, 1200)  # the report had 3,000: the same path, a third of the moves
    assert flowdesk(db, "db", "apply").returncode == 0
    old, queued = interrupted_tidy(db, folder, 300)
    assert 300 <= queued < 1200 and len(top_files(folder)) == 1200

    new = flowdesk(db, "run", "tidy", "--folder", str(folder), "--new")
    new_id = new.stdout.splitlines()[0]
    assert (
        f"canceled interrupted run {old} on this input ({queued:,} queued moves withdrawn "
        "(never made)); starting a new run"
    ) in new.stderr, new.stderr
    line = next(x for x in flowdesk(db, "runs").stdout.splitlines() if x.startswith(old))
    assert "canceled" in line and "queued" not in line, line

    resumed = flowdesk(db, "resume", "--all")
    assert "delivered" not in resumed.stdout, resumed.stdout
    assert top_files(folder) == files  # the canceled run moved nothing

    answered = flowdesk(db, "answer", new_id, "yes")
    assert answered.returncode == 0, answered.stderr
    assert "1,200 files: 1,200 moved" in answered.stdout, answered.stdout
    assert top_files(folder) == {} and len(tidied(folder)) == 1200

    shown = flowdesk(db, "show", old).stdout
    assert f"1,200 files: {1200:,} not moved (the run was canceled)" in shown, shown
    first = re.search(r"f0\.txt +not moved \(the run was canceled\) +(.*)", shown)
    assert first and first.group(1) in (
        "withdrawn: the run was canceled before this move was made",
        "not moved: the run was canceled before this move was queued",
    ), shown

    undo_old = flowdesk(db, "undo", old)
    assert undo_old.returncode == 0
    assert undo_old.stdout.strip() == (
        f"tidy run {old} (canceled) moved nothing (the cancel withdrew its "
        f"{queued:,} queued moves); nothing to undo"
    )
    assert len(tidied(folder)) == 1200  # untouched by the old run's undo
    undo_new = flowdesk(db, "undo", new_id)
    assert undo_new.returncode == 0, undo_new.stdout
    assert undo_new.stdout.splitlines()[0] == f"tidy run {new_id}: 1,200 moved back"
    assert top_files(folder) == files and tidied(folder) == []


def test_cancel_of_a_tidy_with_queued_moves_then_resume_moves_nothing_more(tmp_path):
    """(b) ``flowdesk cancel`` withdraws the moves not made; ``resume --all``
    delivers none of them; the 40 made before the cancel are the run's and
    its ``undo`` moves them back."""
    db, folder = tmp_path / "c.db", tmp_path / "dl"
    files = fill(folder, 1000)
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id, queued = interrupted_tidy(db, folder, 100)
    store = open_store(db)
    try:  # a dispatcher (the app, another CLI) makes 40 of them first
        assert Dispatcher(store, builtin_destinations(store)).dispatch(limit=40) == 40
    finally:
        store.close()
    assert len(tidied(folder)) == 40

    canceled = flowdesk(db, "cancel", run_id)
    assert canceled.returncode == 0, canceled.stderr
    assert canceled.stdout.strip() == (
        f"run {run_id} canceled; {queued - 40:,} queued moves withdrawn (never made)"
    )
    resumed = flowdesk(db, "resume", "--all")
    assert "delivered" not in resumed.stdout, resumed.stdout
    assert len(tidied(folder)) == 40 and len(top_files(folder)) == 960

    shown = flowdesk(db, "show", run_id).stdout
    assert f"1,000 files: 40 moved, {960:,} not moved (the run was canceled)" in shown, shown
    undo = flowdesk(db, "undo", run_id)
    assert undo.returncode == 0, undo.stdout
    # the cancel's withdrawals are not claimed as the undo's own (a tryout
    # read "N queued moves withdrawn" twice, from the cancel and the undo)
    assert undo.stdout.splitlines()[0] == (
        f"tidy run {run_id}: 40 moved back, {queued - 40:,} withdrawn before by cancel (never made)"
    )
    assert top_files(folder) == files and tidied(folder) == []
    shown = flowdesk(db, "show", run_id).stdout
    assert "40 moved back by undo" in shown, shown
    assert flowdesk(db, "resume", "--all").stdout.count("delivered") == 0


@pytest.mark.slow
def test_a_second_tidy_leaves_files_the_first_has_queued(tmp_path):
    """(c) A second tidy started while the first's moves are queued plans
    only the other files, names the first run for the rest, and each run's
    undo moves back only its own."""
    db, folder = tmp_path / "c.db", tmp_path / "dl"
    files = fill(folder, 500)
    assert flowdesk(db, "db", "apply").returncode == 0
    first, _queued = interrupted_tidy(db, folder, 100)
    # the first run is resumed with no dispatcher (its process dies after the
    # loop): every move queued, none made
    store = open_store(db)
    from desktop_app.flows.tidy import build_tidy_flow

    engine = Engine(store, flows=[build_tidy_flow()])
    assert engine.resume(first).status == "completed"
    store.close()
    assert undelivered(db, first) == 500 and top_files(folder) == files

    second = flowdesk(db, "run", "tidy", "--folder", str(folder))
    assert second.returncode == 0, second.stderr
    second_id = second.stdout.splitlines()[0]
    assert second_id != first
    shown = flowdesk(db, "show", second_id).stdout
    assert "500 files: 500 left to another run (it had the move queued)" in shown, shown
    assert f"queued by tidy run {first}" in shown
    assert second.stdout.splitlines()[-1] == f"run {second_id} completed", second.stdout

    # files added since: the second run of the folder takes only those
    for i in range(500, 520):
        (folder / f"f{i}.txt").write_text(f"{i}\n")
    third = flowdesk(db, "run", "tidy", "--folder", str(folder))
    third_id = third.stdout.splitlines()[0]
    assert third.stdout.splitlines()[-1] == f"run {third_id} waiting", third.stdout
    answered = flowdesk(db, "answer", third_id, "yes")
    assert answered.returncode == 0, answered.stderr
    # the answer's delivery made the first run's moves too: each by its own run
    assert top_files(folder) == {} and len(tidied(folder)) == 520
    assert "500 files: 500 moved" in flowdesk(db, "show", first).stdout
    shown3 = flowdesk(db, "show", third_id).stdout
    assert "520 files: 20 moved, 500 left to another run (it had the move queued)" in shown3, shown3

    undo3 = flowdesk(db, "undo", third_id)
    assert undo3.stdout.splitlines()[0] == f"tidy run {third_id}: 20 moved back"
    assert sorted(top_files(folder)) == sorted(f"f{i}.txt" for i in range(500, 520))
    undo1 = flowdesk(db, "undo", first)
    assert undo1.stdout.splitlines()[0] == f"tidy run {first}: 500 moved back"
    assert "500 moved back by undo" in flowdesk(db, "show", first).stdout
    assert len(top_files(folder)) == 520 and tidied(folder) == []


class Note(BaseModel):
    sent: int = 0


def mailer() -> object:
    """A flow that queues one mail (an outbox intent to ``mail``), then
    waits for an answer: a run of it is canceled with its intent queued."""

    def queue(state: Note, ctx: object) -> dict[str, int]:
        ctx.send("mail", {"to": "a@example.org"})  # type: ignore[attr-defined]
        return {"sent": 1}

    def wait(state: Note, ctx: object) -> dict[str, int]:
        ctx.interrupt("send it?")  # type: ignore[attr-defined]
        return {}

    return FlowBuilder("mailer", Note).step("queue", queue).step("wait", wait).chain().compile()


class Recorder:
    def __init__(self) -> None:
        self.got: list[object] = []

    def send(self, idempotency_key: str, payload: object) -> dict[str, bool]:
        self.got.append(payload)
        return {"ok": True}

    def lookup(self, idempotency_key: str) -> None:
        return None


@pytest.mark.parametrize("kind", ["sqlite_store", "pg_store"])
def test_cancel_withdraws_a_generic_flows_queued_intent(request, kind):
    """(d) Engine level: a flow queues an intent, then waits; a cancel
    withdraws the intent, and no dispatcher ever delivers it."""
    store = request.getfixturevalue(kind)

    flow = mailer()
    engine = Engine(store, flows=[flow], clock=ManualClock())
    rid = engine.run(flow, {}).run_id
    assert store.undelivered_intents() == {rid: 1}
    run, withdrawn, in_flight, made, unknown = engine.cancel_withdrawing(rid)
    assert run.status == "canceled" and len(withdrawn) == 1 and in_flight == []
    assert made == unknown == []  # it was pending: never sent
    assert store.undelivered_intents() == {}
    mail = Recorder()
    assert Dispatcher(store, {"mail": mail}).dispatch() == 0
    assert mail.got == []
    (failed,) = store.intents(["failed"])
    assert failed.last_error == "withdrawn: the run was canceled before this was delivered"


@pytest.mark.parametrize("kind", ["sqlite_store", "pg_store"])
def test_tidy_rows_after_cancel_and_a_second_plan(request, kind, tmp_path):
    """On either store: a tidy with every move queued (no dispatcher yet)
    makes a second tidy of the folder leave those files, naming the run; a
    canceled tidy's planned rows say the run was canceled."""
    from desktop_app.flows.tidy import build_tidy_flow
    from desktop_app.flows.tidy_outcomes import outcome_counts, outcomes_of
    from desktop_app.store.domain.tidy import moves_of_run

    store = request.getfixturevalue(kind)
    folder = tmp_path / "dl"
    fill(folder, 30)
    engine = Engine(store, flows=[build_tidy_flow()], clock=ManualClock())
    first = engine.run("tidy", {"folder": str(folder)}).run_id
    assert engine.resume_with(first, "yes").status == "completed"
    assert store.undelivered_intents() == {first: 30}
    second = engine.run("tidy", {"folder": str(folder)})
    assert second.status == "completed"  # nothing of its own to move: no question
    rows = store.query(moves_of_run(second.run_id))
    assert outcome_counts(outcomes_of(rows)) == (
        "30 files: 30 left to another run (it had the move queued)"
    )
    assert {m.reason for m in rows} == {f"queued by tidy run {first}"}
    (folder / "new.txt").write_text("new\n")
    third = engine.run("tidy", {"folder": str(folder)}).run_id
    assert engine.cancel(third).status == "canceled"
    rows = store.query(moves_of_run(third))
    assert outcome_counts(outcomes_of(rows)) == (
        "31 files: 1 not moved (the run was canceled), "
        "30 left to another run (it had the move queued)"
    )
    assert store.undelivered_intents() == {first: 30}  # the other run's moves stay queued


def test_printed_show_hint_of_a_canceled_tidy_runs(tmp_path):
    """The command ``answer`` prints to list a big canceled run's files runs as printed."""
    db, folder = tmp_path / "c.db", tmp_path / "dl"
    fill(folder, 300)
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id, _queued = interrupted_tidy(db, folder, 50)
    assert flowdesk(db, "cancel", run_id).returncode == 0
    shown = flowdesk(db, "show", run_id).stdout
    hint = re.search(r"`(flowdesk [^`]+)`", shown)
    assert hint, shown
    ran = as_printed(hint.group(1), env={**os.environ})
    assert ran.returncode == 0, ran.stderr
    assert "not moved (the run was canceled)" in ran.stdout


@pytest.mark.parametrize("kind", ["sqlite_store", "pg_store"])
def test_two_tidies_planned_before_either_queued_each_claim_only_their_own(request, kind, tmp_path):
    """Two runs that planned the same folder before either queued a move:
    the one whose moves are made second does not count the other's files as
    its own, and its undo moves nothing back."""
    from desktop_app.flows.tidy import build_tidy_flow
    from desktop_app.flows.tidy_outcomes import outcomes_of
    from desktop_app.flows.tidy_undo import undo_tidy_run
    from desktop_app.store.domain.tidy import moves_of_run

    store = request.getfixturevalue(kind)
    folder = tmp_path / "dl"
    files = fill(folder, 12)
    engine = Engine(store, flows=[build_tidy_flow()], clock=ManualClock())
    first = engine.run("tidy", {"folder": str(folder)}).run_id
    second = engine.run("tidy", {"folder": str(folder)}).run_id
    for rid in (first, second):
        assert engine.resume_with(rid, "yes").status == "completed"
    assert Dispatcher(store, builtin_destinations(store)).dispatch() == 24
    assert top_files(folder) == {} and len(tidied(folder)) == 12
    by_run = [outcomes_of(store.query(moves_of_run(r))) for r in (first, second)]
    for a, b in zip(*by_run, strict=True):  # each file: one run moved it, the other says so
        assert {a.outcome, b.outcome} == {"moved", "elsewhere"}, (a, b)
    made = [sum(o.outcome == "moved" for o in outs) for outs in by_run]
    for rid, n in zip((first, second), made, strict=True):
        report = undo_tidy_run(store, rid)
        assert report.moved_back == n and report.left == [], report
    assert top_files(folder) == files and tidied(folder) == []


#: a dispatcher process whose destination makes the effect (a line in a
#: file), then dies before its mark: kill -9 between send and ``delivered``
DYING_DISPATCHER = """
import os, signal, sys
from desktop_app.flow.outbox import Dispatcher
from desktop_app.store.sqlite.store import open_store

class Dying:
    def send(self, key, payload):
        with open(sys.argv[2], "a") as fh:
            fh.write(key + "\\n")
        os.kill(os.getpid(), signal.SIGKILL)

    def lookup(self, key):
        return None

Dispatcher(open_store(sys.argv[1]), {"mail": Dying()}).dispatch()
"""


class Effects:
    """The mail destination as the program that owns it would look it up:
    the lines its sends wrote."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, idempotency_key: str, payload: object) -> dict[str, bool]:
        raise AssertionError("a canceled run's intent is never sent")

    def lookup(self, idempotency_key: str) -> dict[str, str] | None:
        lines = self.path.read_text().split() if self.path.exists() else []
        return {"line": idempotency_key} if idempotency_key in lines else None


def mailer_killed_mid_send(db: Path, effects: Path) -> tuple[Engine, str]:
    """A mailer run waiting after its intent, whose dispatcher process was
    killed after making the effect and before marking it delivered."""

    flow = mailer()
    engine = Engine(open_store(db), flows=[flow])
    rid = engine.run(flow, {}).run_id
    died = cli_forkserver.run_argv(
        [sys.executable, "-c", DYING_DISPATCHER, str(db), str(effects)], cwd=REPO, check=False
    )
    assert died.returncode == -signal.SIGKILL
    assert len(effects.read_text().split()) == 1
    assert len(engine.store.intents(["sending"])) == 1  # as the crash left it
    return engine, rid


@pytest.mark.scenario("S108")
def test_a_cancel_after_a_kill_mid_send_says_the_outcome_is_unknown(db_path, tmp_path):
    """No destination here can check the effect: the cancel does not call it
    'never made'; the intent says its outcome is unknown, and no dispatcher
    makes it again."""
    from desktop_app.flow.outbox import OUTCOME_UNKNOWN
    from desktop_app.runs_view import withdrawn_text

    effects = tmp_path / "effects"
    engine, rid = mailer_killed_mid_send(db_path, effects)
    done = engine.cancel_withdrawing(rid)
    assert done.run.status == "canceled"
    assert (len(done.withdrawn), len(done.made), len(done.unknown)) == (0, 0, 1)
    assert withdrawn_text("mailer", 0, 0, 1) == (
        "1 side effect whose outcome is unknown: the process making it stopped mid-way, "
        "and it is never made again"
    )
    (failed,) = engine.store.intents(["failed"])
    assert failed.last_error == OUTCOME_UNKNOWN
    assert Dispatcher(engine.store, {"mail": Effects(effects)}).dispatch() == 0
    assert len(effects.read_text().split()) == 1
    # show keeps saying it once the cancel is done (it said nothing of it)
    shown = flowdesk(db_path, "show", rid)
    assert shown.returncode == 0, shown.stderr
    assert (
        "outcome unknown: 1 side effect withdrawn mid-send (the process sending it stopped, "
        "or the send failed midway) and never looked up; Flowdesk never makes it again: "
        f"check at 'mail' whether it was made ({failed.intent_id})"
    ) in shown.stdout, shown.stdout
    as_json = json.loads(flowdesk(db_path, "show", rid, "-o", "json").stdout)
    assert [i["intent_id"] for i in as_json["unknown_outcome"]] == [failed.intent_id]


def test_a_cancel_after_a_kill_mid_send_asks_the_destination_and_records_it_made(db_path, tmp_path):
    """The program registered its destination's lookup: the cancel finds the
    effect made, records it delivered with the destination's receipt, and
    says so (it said 'withdrawn (never made)')."""
    from desktop_app.flow import outbox

    effects = tmp_path / "effects"
    engine, rid = mailer_killed_mid_send(db_path, effects)
    outbox.register_lookup("mail", lambda store: Effects(effects))
    try:
        done = engine.cancel_withdrawing(rid)
    finally:
        outbox._LOOKUPS.pop("mail")
    assert (len(done.withdrawn), len(done.made), len(done.unknown)) == (0, 1, 0)
    (delivered,) = engine.store.intents(["delivered"])
    assert delivered.receipt == {"line": delivered.intent_id}
    assert engine.store.intents(["failed"]) == []
