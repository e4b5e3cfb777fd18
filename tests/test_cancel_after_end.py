"""``cancel`` of a run that ended with side effects still queued withdraws them.

A new user's tryout: a tidy of 800 files, ``answer RUN yes`` killed with
``kill -9`` after ~100 moves, then ``flowdesk cancel RUN`` said "run … is
already completed; nothing to do" (exit 1) while ``runs`` showed 698 moves
queued, and the next delivery made them all; a program's own flow that
queued 5 HTTP posts and completed had no command to withdraw them. Now the
cancel withdraws them as a cancel of a live run does (same liveness and
claim rules), keeps the run's status and says what it withdrew and what is
left. Real ``flowdesk`` processes, ``kill -9``, a real HTTP server on
127.0.0.1 counting the requests, and a race released by a barrier.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.cli_support import REPO, as_printed, flowdesk, serving
from tests.line_racer import LineRacer
from tests.ownership_racer import open_db
from tests.posts_racer import posts_flow, posts_made
from tests.tidy_folders import fill, tidied, top_files

HERE = Path(__file__).resolve().parent
RACER = HERE / "posts_racer.py"
ROUNDS = 24


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A real HTTP destination on 127.0.0.1 (tests/outbox_server.py)."""
    portfile = tmp_path / "port"
    proc = cli_forkserver.popen([sys.executable, str(HERE / "outbox_server.py"), str(portfile)])
    try:
        while not portfile.exists() or not portfile.read_text():
            assert proc.poll() is None
            time.sleep(0.02)
        yield f"http://127.0.0.1:{portfile.read_text()}"
    finally:
        proc.kill()
        proc.wait()


def statuses(db: Path | str, run_id: str) -> dict[str, str]:
    """Intent id -> status, of the run's outbox intents (``db``: a SQLite
    path or a PostgreSQL URL)."""
    store = open_db(str(db))
    try:
        every = store.intents(["pending", "sending", "delivered", "failed"], limit=10_000)
        return {i.intent_id: i.status for i in every if i.run_id == run_id}
    finally:
        store.close()


def runs_line(db: Path, run_id: str) -> str:
    return next(x for x in flowdesk(db, "runs").stdout.splitlines() if x.startswith(run_id))


@pytest.mark.slow
def test_cancel_of_a_completed_tidy_killed_mid_delivery_withdraws_the_rest(tmp_path):
    """The tryout's commands: ``answer RUN yes &`` killed with ``kill -9``
    after ~100 moves; ``cancel RUN`` withdraws every move not made (the one
    mid-move is looked up, never called "never made"), the run stays
    ``completed``; ``resume --all`` and ``flowdesk agent`` move nothing more;
    the printed ``undo`` moves back each file moved."""
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    files = fill(folder, 800)
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    run_id = started.stdout.splitlines()[0]
    answer = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "answer", run_id, "yes"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        while len(tidied(folder)) < 100:
            assert answer.poll() is None
            time.sleep(0.01)
    finally:
        os.kill(answer.pid, signal.SIGKILL)
        answer.wait()
    moved = len(tidied(folder))
    assert moved < 800
    line = runs_line(db, run_id)
    assert "completed" in line and "moves queued" in line, line

    canceled = flowdesk(db, "cancel", run_id)
    assert canceled.returncode == 0, canceled.stdout + canceled.stderr
    said = canceled.stdout.strip()
    m = re.fullmatch(
        rf"run {run_id} is already completed \(it stays completed\); "
        r"(?P<w>[\d,]+) queued moves withdrawn \(never made\)"
        r"(?:; (?P<made>1) move made before the process making it stopped "
        r"\(recorded as made\))?; `(?P<undo>[^`]+)` moves back the files it moved",
        said,
    )
    assert m, said
    withdrawn = int(m["w"].replace(",", ""))
    assert withdrawn == 800 - len(tidied(folder))  # the one mid-move was looked up
    assert withdrawn + moved == 800 or (withdrawn + moved == 799 and m["made"])
    assert len(tidied(folder)) == 800 - withdrawn
    line = runs_line(db, run_id)
    assert "completed" in line and "queued" not in line and "may have" not in line, line

    resumed = flowdesk(db, "resume", "--all")
    assert resumed.returncode == 0, resumed.stderr
    assert "delivered" not in resumed.stdout, resumed.stdout
    agent = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "agent", "--poll", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    first = serving(agent)
    time.sleep(3)  # a dozen polls: it would have delivered them by now
    agent.send_signal(signal.SIGTERM)
    _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, first + err
    assert len(tidied(folder)) == 800 - withdrawn
    assert set(statuses(db, run_id).values()) == {"delivered", "failed"}

    shown = flowdesk(db, "show", run_id).stdout
    assert (
        f"800 files: {800 - withdrawn:,} moved, {withdrawn:,} not moved "
        "(withdrawn by cancel after the run ended)"
    ) in shown, shown
    again = flowdesk(db, "cancel", run_id)
    assert again.returncode == 1
    assert f"run {run_id} is already completed; nothing to do" in again.stderr, again.stderr

    undo = as_printed(m["undo"], dict(os.environ))
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert top_files(folder) == files and tidied(folder) == []


def test_cancel_of_a_completed_runs_http_posts_after_a_kill(tmp_path, server):
    """A program's own flow queued 5 POSTs and completed; its delivering
    process was killed (``kill -9``) after the 2nd POST reached the server
    and before it was recorded. ``flowdesk cancel RUN`` withdraws the 3 not
    sent and says the 2nd's outcome is unknown (no lookup of the program's
    destination here); the program's dispatcher, ``resume --all`` and
    ``flowdesk agent`` then send nothing."""
    db = tmp_path / "p.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    store = open_store(db)
    try:
        run_id = Engine(store, flows=[posts_flow()]).run(posts_flow(), {}).run_id
        assert store.get_run(run_id).status == "completed"
    finally:
        store.close()
    keys = sorted(statuses(db, run_id))
    deliver = cli_forkserver.popen(
        [sys.executable, str(RACER), "deliver", str(db), server, "2"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert deliver.stdout is not None
    assert deliver.stdout.readline().strip() == "stalled"
    os.kill(deliver.pid, signal.SIGKILL)
    deliver.wait()
    assert sum(posts_made(server, k) for k in keys) == 2
    line = runs_line(db, run_id)
    assert "completed" in line and "· 3 side effects queued" in line, line
    assert "· 1 side effect may have been made" in line, line

    canceled = flowdesk(db, "cancel", run_id)
    assert canceled.returncode == 0, canceled.stdout + canceled.stderr
    assert canceled.stdout.strip() == (
        f"run {run_id} is already completed (it stays completed); "
        "3 queued side effects withdrawn (never made); 1 side effect whose outcome is "
        "unknown: the process making it stopped mid-way, and it is never made again"
    )
    assert sorted(statuses(db, run_id).values()) == [
        "delivered",
        "failed",
        "failed",
        "failed",
        "failed",
    ]
    line = runs_line(db, run_id)
    assert "completed" in line and "queued" not in line and "may have" not in line, line

    again = cli_forkserver.run_argv(
        [sys.executable, str(RACER), "deliver", str(db), server, "0"], cwd=REPO, check=True
    )
    assert again.returncode == 0
    assert flowdesk(db, "resume", "--all").returncode == 0
    agent = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "agent", "--poll", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    said = serving(agent)
    time.sleep(2)  # some passes of its dispatcher (not a timing assertion)
    agent.send_signal(signal.SIGTERM)
    _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, said + err
    assert [posts_made(server, k) for k in keys].count(1) == 2
    assert sum(posts_made(server, k) for k in keys) == 2


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def race_db(request, tmp_path) -> str:
    """A SQLite file (schema applied by ``flowdesk db apply``) or a fresh
    PostgreSQL database with the schema."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    db = tmp_path / "r.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    return str(db)


@pytest.mark.slow
def test_cancel_and_a_dispatcher_race_over_a_completed_runs_posts(tmp_path, server, race_db):
    """Each round a completed run has 3 POSTs queued; a ``cancel`` (the API
    or the ``flowdesk cancel`` command) and a dispatcher pass are released
    at one instant. Each POST is made at most once, and what the cancel
    said is the truth: what it withdrew is never made, the rest was made by
    the dispatcher (or left to it in flight, then made)."""
    db = race_db
    go = tmp_path / "go"
    canceler = LineRacer(RACER, "cancel", str(db), str(go), server)
    dispatcher = LineRacer(RACER, "dispatch", str(db), str(go), server)
    store = open_db(db)
    engine = Engine(store, flows=[posts_flow()])
    seen = {"withdrew all": 0, "withdrew some": 0, "withdrew none": 0}
    try:
        for rnd in range(ROUNDS):
            run_id = engine.run(posts_flow(), {"n": 3}).run_id
            how = "cli" if rnd % 2 else "api"
            # microseconds each side waits after the release: a race at the
            # same instant, the dispatcher 300 us later, and each side a full
            # second after the other, so that both ends are seen whatever the
            # load (CI's load once gave no "withdrew all" in 24 rounds with
            # 3 ms on PostgreSQL, and once no "withdrew none" on SQLite)
            cancel_delay, delay = [(0, 0), (0, 300), (1_000_000, 0), (0, 1_000_000)][rnd // 2 % 4]
            if how == "cli" and delay < 1_000_000:
                delay *= 10  # a CLI cancel starts its command in the racer first
            canceler.send(f"{rnd} {run_id} {cancel_delay} {how}")
            dispatcher.send(f"{rnd} {run_id} {delay} -")
            assert canceler.line() == f"ready {rnd}"
            assert dispatcher.line() == f"ready {rnd}"
            Path(f"{go}.{rnd}").touch()
            said = canceler.told(rnd)
            delivered = dispatcher.told(rnd)["delivered"]
            keys = sorted(statuses(db, run_id))
            made = {k for k in keys if posts_made(server, k)}
            assert all(posts_made(server, k) <= 1 for k in keys)
            assert len(made) == delivered
            status = statuses(db, run_id)
            assert {k for k, s in status.items() if s == "delivered"} == made
            assert {k for k, s in status.items() if s == "failed"} == set(keys) - made
            if how == "api":
                if "refused" in said:
                    assert said["refused"] == f"run {run_id} is already completed; nothing to do"
                    assert len(made) == 3
                    withdrawn = 0
                else:
                    assert said["status"] == "completed"
                    assert set(said["withdrawn"]) == set(keys) - made
                    assert set(said["in_flight"]) <= made
                    assert said["made"] == said["unknown"] == 0
                    withdrawn = len(said["withdrawn"])
            else:
                m = re.search(r"(\d) queued side effects? withdrawn \(never made\)", said["out"])
                withdrawn = int(m[1]) if m else 0
                assert withdrawn == 3 - len(made), said
                assert said["code"] == (0 if withdrawn else 1), said
                if not withdrawn:
                    assert said["out"].startswith(f"run {run_id} is already completed") or (
                        "nothing to do" in said["err"]
                    ), said
            seen[
                "withdrew all"
                if withdrawn == 3
                else "withdrew some"
                if withdrawn
                else "withdrew none"
            ] += 1
            assert engine.store.get_run(run_id).status == "completed"
    finally:
        store.close()
        canceler.close()
        dispatcher.close()
    assert seen["withdrew all"] and seen["withdrew none"], seen


async def test_the_apps_cancel_of_a_completed_run_withdraws_what_it_left_queued(
    tmp_path, monkeypatch
):
    """The app's Cancel (the palette's, as ``c`` is offered on live runs
    only) on a completed run with 3 POSTs still queued asks, then withdraws
    them and says the run stays completed; with nothing left queued it says
    there is nothing to cancel, without a question."""
    from desktop_app import bootstrap
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.app.screens.confirm import ConfirmScreen
    from desktop_app.app.screens.runs import RunsScreen
    from desktop_app.config import load_settings
    from tests.app_support import messages, settle

    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "no-config.toml"))
    db = tmp_path / "a.db"
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[posts_flow()])
    try:
        run_id = engine.run(posts_flow(), {"n": 3}).run_id
    finally:
        engine.store.close()
    app = FlowdeskApp(settings, flows=[posts_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.runs_screen.action_cancel_run()
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert messages(app)[-1] == (
            f"Run {run_id[:8]} is already completed (it stays completed); "
            "3 queued side effects withdrawn (never made)."
        )
        app.runs_screen.action_cancel_run()
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert messages(app, "error")[-1] == (
            f"Run {run_id[:8]} is already completed; nothing to cancel."
        )
    assert sorted(statuses(db, run_id).values()) == ["failed"] * 3
    store = open_store(db)
    try:
        assert store.get_run(run_id).status == "completed"
    finally:
        store.close()


def test_withdraw_after_end_refuses_what_it_is_not_for(db_path):
    """``Engine.withdraw_after_end`` changes nothing and says why for a run
    that has not ended (cancel it), a canceled one (its cancel withdrew its
    side effects) and a completed one with nothing queued; a completed one
    with POSTs queued keeps ``completed``."""
    from desktop_app.errors import RunStateError
    from desktop_app.flow import FlowBuilder
    from desktop_app.flow.outbox import CANCELED_AFTER_END
    from tests.posts_racer import Posts

    def wait(state: Posts, ctx: object) -> dict[str, int]:
        ctx.interrupt("go on?")  # type: ignore[attr-defined]
        return {}

    waiting = FlowBuilder("posts_wait", Posts).step("wait", wait).chain().compile()
    store = open_store(db_path)
    engine = Engine(store, flows=[posts_flow(), waiting])
    try:
        live = engine.run(waiting, {}).run_id
        with pytest.raises(RunStateError, match=f"run {live} is waiting, not ended: cancel it"):
            engine.withdraw_after_end(live)
        engine.cancel(live)
        with pytest.raises(RunStateError, match=f"run {live} is canceled; nothing to do"):
            engine.withdraw_after_end(live)

        done = engine.run(posts_flow(), {"n": 2}).run_id
        got = engine.withdraw_after_end(done)
        assert (got.run.status, len(got.withdrawn), got.in_flight) == ("completed", 2, [])
        assert {i.last_error for i in store.intents(["failed"])} == {CANCELED_AFTER_END}
        assert store.get_run(done).status == "completed"
        with pytest.raises(RunStateError, match=f"run {done} is already completed; nothing"):
            engine.withdraw_after_end(done)
    finally:
        store.close()
