"""A run whose flow's code changed between a stop and a resume (a step
renamed): every refusal names commands that work as printed (restore the
code and ``resume``, ``cancel``, or ``resume --onto-current``, run as
printed here on PostgreSQL and in ``tests/test_resume_onto_current.py``),
``show`` says the run is stuck instead of promising that the agent fires
its timer, ``flowdesk agent`` says once per run that it cannot go on with
it (also on PostgreSQL, as a worker, without spinning on the deadline it
may not fire), and restoring the old code lets ``resume`` finish it with
each step run once.

The user's flow is a module of its own (registered with ``FLOWDESK_FLOWS``,
importable through ``PYTHONPATH``) whose file the test rewrites, as a user
edits theirs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import FlowVersionMismatchError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import as_printed, flowdesk, spawn, stop_agent
from tests.polling import until

#: the user's flow; its steps wait while ``<log>.hold`` exists (a step that
#: takes its time, for a test that needs one)
FLOW = """
import time
from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Reminder(BaseModel):
    log: str
    done: bool = False


def note(name):
    def step(state):
        while Path(state.log + ".hold").exists():
            time.sleep(0.05)
        with Path(state.log).open("a") as out:
            out.write(name + "\\n")
        return {{}}

    return step


remind = (
    FlowBuilder("remind", Reminder, version="1")
    .step("{first}", note("{first}"))
    .sleep("pause", {pause})
    .step("finish", note("finish"))
    .chain()
    .compile()
)
"""

#: seconds the run's timer waits: short, so it falls due during the test
PAUSE_S = 1.0
MISLEADING = ("Fail the run", "fork it onto the new version", "fires it on its own")


def write_flow(folder: Path, first: str) -> None:
    """The user's flow module as its author has it now: ``first`` names its
    first step (``prep``, then renamed ``prepare``)."""
    path = folder / "remind_flows.py"
    path.write_text(FLOW.format(first=first, pause=PAUSE_S))
    # a rewrite within the same second must not be taken for the cached bytecode
    for cached in (folder / "__pycache__").glob("remind_flows.*"):
        cached.unlink()


def user_env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWDESK_")}
    paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["FLOWDESK_FLOWS"] = '["remind_flows:remind"]'
    return env


def commands(text: str) -> list[str]:
    """Every backquoted ``flowdesk ...`` command in ``text``."""
    return [c for c in re.findall(r"`([^`]+)`", text) if c.startswith("flowdesk ")]


def start(db: Path | str, log: Path, env: dict[str, str]) -> str:
    out = flowdesk(db, "start", "remind", "--input", json.dumps({"log": str(log)}), env=env)
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.splitlines()[0]
    assert f"run {run_id} waiting" in out.stdout, out.stdout
    return run_id


def status(db: Path | str, run_id: str, env: dict[str, str]) -> str:
    out = flowdesk(db, "show", run_id, "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["status"])


def user_db(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    """The user's flow module (first step ``prep``) in a folder of its own,
    the environment that registers it, and a database with the schema."""
    code = tmp_path / "code"
    code.mkdir()
    write_flow(code, "prep")
    env = user_env(code)
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    return code, env, db


def test_a_run_whose_flow_changed_is_said_stuck_and_each_hint_works(tmp_path: Path) -> None:
    code, env, db = user_db(tmp_path)
    kept_log, ended_log = tmp_path / "kept.log", tmp_path / "ended.log"
    kept, ended = start(db, kept_log, env), start(db, ended_log, env)
    write_flow(code, "prepare")  # the author renames a step
    time.sleep(PAUSE_S + 0.5)  # both timers fall due (not a timing assertion)

    refused = flowdesk(db, "resume", kept, env=env)
    assert refused.returncode == 1, refused.stderr
    assert "was started under flow version 1+" in refused.stderr
    assert not any(m in refused.stderr for m in MISLEADING), refused.stderr
    resume_hint, cancel_hint, onto_hint = hints = commands(refused.stderr)
    assert resume_hint == f"flowdesk --db {db} resume {kept}"
    assert cancel_hint == f"flowdesk --db {db} cancel {kept}"
    assert onto_hint == f"flowdesk --db {db} resume {kept} --onto-current"
    assert "restore the flow's code as it was then" in refused.stderr

    # show says it is stuck, and offers no command that would be refused
    shown = flowdesk(db, "show", kept, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "stuck: its flow changed since it started" in shown.stdout, shown.stdout
    assert not any(m in shown.stdout for m in MISLEADING), shown.stdout
    assert "fire it once due with" not in shown.stdout
    assert commands(shown.stdout) == hints
    as_json = json.loads(flowdesk(db, "show", kept, "-o", "json", env=env).stdout)
    assert as_json["stuck"] and [w["command"] for w in as_json["waits"]] == [None]
    waiting = flowdesk(db, "waiting", env=env)
    assert f"`flowdesk --db {db} show {kept}` says what works" in waiting.stdout

    every = flowdesk(db, "resume", "--all", env=env)
    assert every.returncode == 1, every.stdout
    (line,) = [ln for ln in every.stdout.splitlines() if ln.startswith(f"run {kept} ")]
    assert line.startswith(f"run {kept} not resumed: run {kept} was started")
    assert commands(line) == hints

    # replay and fork are refused the same way (no hint to a refused replay)
    for args in (["replay", f"{kept}:0"], ["fork", kept, "--changes", "{}"]):
        out = flowdesk(db, *args, env=env)
        assert out.returncode == 1, (args, out.stderr)
        assert commands(out.stderr) == hints, out.stderr

    # the agent passes both due timers: it says so once per run, not every pass
    agent = spawn("--db", str(db), "agent", "--poll", "0.1", env=env)
    lines: list[str] = []
    assert agent.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(agent.stderr or ()), daemon=True)
    reader.start()

    def said_of(rid: str) -> list[str]:
        return [ln for ln in list(lines) if "cannot go on here" in ln and rid in ln]

    try:
        until(lambda: bool(said_of(kept) and said_of(ended)), "the agent says it cannot go on")
        time.sleep(1.0)  # some ten more passes (not a timing assertion)
    finally:
        stop_agent(agent)
        reader.join(timeout=60)
    assert agent.returncode == 0, lines
    said = [ln for ln in lines if "cannot go on here" in ln]
    assert [sum(rid in line for line in said) for rid in (kept, ended)] == [1, 1], said
    assert all(resume_hint.replace(kept, rid) in " ".join(said) for rid in (kept, ended))
    assert status(db, kept, env) == status(db, ended, env) == "waiting"
    assert not kept_log.read_text().count("finish")

    # the printed cancel ends a run; restoring the code lets the printed resume finish one
    ended_cancel = f"flowdesk --db {db} cancel {ended}"
    assert ended_cancel in commands(flowdesk(db, "resume", ended, env=env).stderr)
    out = as_printed(ended_cancel, env)
    assert out.returncode == 0 and f"run {ended} canceled" in out.stdout, out.stderr
    write_flow(code, "prep")
    out = as_printed(resume_hint, env)
    assert out.returncode == 0, out.stderr
    assert f"run {kept} completed" in out.stdout
    assert kept_log.read_text().splitlines() == ["prep", "finish"]  # each step ran once
    assert ended_log.read_text().splitlines() == ["prep"]


async def test_the_app_says_which_keys_work_for_a_run_whose_flow_changed(tmp_path: Path) -> None:
    """Launch recovery leaves it to the launch report, which lists it with
    its fork; ``r`` refuses it with the app's keys (``r`` once the code is
    restored, ``c``), not the engine's method names."""
    from desktop_app import bootstrap
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.app.screens.launch_report import LaunchReportScreen
    from desktop_app.app.screens.runs import RunsScreen
    from tests.app_support import messages, settle
    from tests.test_app_inbox_settings import Approval, approve_flow, settings_for

    settings = settings_for(tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    old = bootstrap.build_engine(settings, flows=[approve_flow("1")])
    try:
        run_id = old.start("approve", Approval())  # interrupted before it ran
    finally:
        old.store.close()
    app = FlowdeskApp(settings, flows=[approve_flow("2")])
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        # at launch the report (open) lists it with what can be done: no
        # toast that repeats it and points at "the next launch"'s report
        assert messages(app, "error") == []
        assert app.recovery == (
            "1 run an earlier process left running is of a flow that changed since it started "
            "(see the launch report); nothing to resume"
        )
        report = app.screen
        assert isinstance(report, LaunchReportScreen)
        assert [r.run_id for r in report.runs] == [run_id]
        await pilot.click("#close")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        screen.table.follow(run_id)
        await pilot.press("r")
        await settle(pilot)
        said = messages(app, "error")[-1]
        assert said.startswith(f"run {run_id} was started under flow version")
        assert "press r again, or press c to cancel it" in said and "Engine." not in said


class Nap(BaseModel):
    n: int = 0


def nap_flow(first: str) -> Any:
    """A flow whose run sleeps 10 ms after its step ``first``."""
    builder = FlowBuilder("nap", Nap, version="1").step(first, lambda s: {"n": 1})
    return builder.sleep("pause", 0.01).step("finish", lambda s: {"n": 2}).chain().compile()


def due_timer_of_a_changed_flow(open_store: Callable[[], Any]) -> tuple[Engine, str]:
    """A run whose timer fell due, made under ``nap_flow("prep")``, and an
    engine on ``open_store()`` with the flow's step renamed since."""
    old = Engine(open_store(), flows=[nap_flow("prep")])
    run_id = old.run("nap", Nap()).run_id
    assert old.status(run_id).status == "waiting"
    old.store.close()
    time.sleep(0.05)  # its timer falls due
    return Engine(open_store(), flows=[nap_flow("prepare")]), run_id


def serve_a_while(serve: Callable[[threading.Event], None], passes: list[int]) -> None:
    """``serve(stop)`` on a thread for three passes and about a second more."""
    stop = threading.Event()
    server = threading.Thread(target=serve, args=(stop,))
    server.start()
    try:
        until(lambda: len(passes) >= 3, "three passes")
        time.sleep(1.0)  # about five more passes (a spin would make thousands)
    finally:
        stop.set()
        server.join(timeout=60)


def test_serve_refuses_a_due_timer_of_a_changed_flow_once_and_does_not_spin(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The engine side of ``flowdesk agent``: the refusal goes to
    ``on_refused`` once and to the log once (the run, where, why), and a
    deadline it may not fire does not make every pass start at once
    (passes stay one per ``poll_s``)."""
    engine, run_id = due_timer_of_a_changed_flow(lambda: open_store(db_path))
    refused: list[tuple[str, type]] = []
    passes: list[int] = []
    errors: list[Exception] = []

    def serve(stop: threading.Event) -> None:
        engine.serve(
            stop,
            poll_s=0.2,
            on_tick=lambda: passes.append(1),
            on_refused=lambda rid, exc: (refused.append((rid, type(exc))), errors.append(exc)),
        )

    # what the set-up logged (at INFO, when an earlier test of this worker
    # set up Flowdesk's logging in-process) is not what serve says
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="desktop_app.flow.engine"):
        serve_a_while(serve, passes)
    assert refused == [(run_id, FlowVersionMismatchError)]
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name == "desktop_app.flow.engine" and r.levelno >= logging.WARNING
    ]
    assert said == [f"run {run_id} cannot go on in this process: {errors[0]}"]
    assert len(passes) < 50, len(passes)  # one per poll, not a busy loop
    assert engine.status(run_id).status == "waiting"
    engine.store.close()


@pytest.mark.postgres
def test_a_postgres_worker_refuses_a_changed_flow_once_and_does_not_spin(pg_url: str) -> None:
    """``Worker`` (``flowdesk agent --worker``, every PostgreSQL agent): a
    due timer of a run whose flow changed goes to ``on_refused`` once, and
    the deadline it may not fire leaves its passes at one per ``poll_s``
    (it made them run back to back, each refusing again)."""
    from desktop_app.flow.worker import Worker
    from desktop_app.store.postgres.store import open_postgres_store

    engine, run_id = due_timer_of_a_changed_flow(lambda: open_postgres_store(pg_url))
    refused: list[tuple[str, type]] = []
    passes: list[int] = []
    worker = Worker(
        engine,
        poll_s=0.2,
        on_tick=lambda: passes.append(1),
        on_refused=lambda rid, exc: refused.append((rid, type(exc))),
    )
    serve_a_while(worker.serve, passes)
    assert refused == [(run_id, FlowVersionMismatchError)]
    assert len(passes) < 50, len(passes)  # one per poll, not a busy loop
    assert engine.status(run_id).status == "waiting"
    engine.store.close()


@pytest.mark.postgres
def test_flowdesk_agent_on_postgres_says_once_and_its_move_hint_works(
    pg_url: str, tmp_path: Path
) -> None:
    """``flowdesk --db postgresql://… agent`` says once per run that it
    cannot go on with a run whose flow changed; the move it prints, run as
    printed, continues the run on the new version there."""
    code = tmp_path / "code"
    code.mkdir()
    write_flow(code, "prep")
    env = user_env(code)
    log = tmp_path / "pg.log"
    run_id = start(pg_url, log, env)
    write_flow(code, "prepare")
    time.sleep(PAUSE_S + 0.5)  # its timer falls due (not a timing assertion)
    agent = spawn("--db", pg_url, "agent", "--poll", "0.1", env=env)
    lines: list[str] = []
    assert agent.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(agent.stderr or ()), daemon=True)
    reader.start()
    try:
        until(lambda: any("cannot go on here" in ln for ln in list(lines)), "the agent says so")
        time.sleep(1.0)  # some ten more passes (not a timing assertion)
    finally:
        stop_agent(agent)
        reader.join(timeout=60)
    said = [ln for ln in lines if "cannot go on here" in ln]
    assert len(said) == 1 and run_id in said[0], said
    move = f"flowdesk --db {pg_url} resume {run_id} --onto-current"
    assert move in commands(said[0])
    out = as_printed(move, env)
    assert out.returncode == 0, out.stderr
    new = out.stdout.splitlines()[1]
    assert f"run {new} completed" in out.stdout
    assert log.read_text().splitlines() == ["prep", "finish"]
    assert status(pg_url, run_id, env) == "canceled"


def test_an_interrupted_run_whose_flow_changed_is_not_offered_r_to_resume(db_path: Path) -> None:
    """The side panel and the detail's header said "press r to resume" of an
    interrupted run whose flow changed since it started, and r then refused
    it (a tryout): they say what works instead; a run of the current
    version, or of a flow not registered here (r says what to set), keeps
    the resume hint."""
    from desktop_app.app.screens.detail import header_text
    from desktop_app.app.widgets.run_summary import CHANGED_HINT, RESUME_HINT, summary_text
    from desktop_app.store.records import RunRecord
    from desktop_app.store.sqlite.store import open_store
    from tests.test_app_inbox_settings import approve_flow

    old, new = approve_flow("1"), approve_flow("2")
    engine = Engine(open_store(db_path), flows=[new])
    try:
        now = 1_800_000_000.0

        def interrupted(flow_name: str, version: str) -> RunRecord:
            return RunRecord("r1", flow_name, version, "running", 3, now - 60, now - 30)

        for run, hint in (
            (interrupted("approve", old.version), CHANGED_HINT),
            (interrupted("approve", new.version), RESUME_HINT),
            (interrupted("unknown", "1"), RESUME_HINT),
        ):
            said = f"interrupted — {hint}"
            assert said in summary_text(run, None, None, now, engine=engine).plain
            assert said in header_text(run, now, engine=engine).plain
        # what refuses the old version's run here, as `show` and a worker say it
        refusal = engine.version_refusal(interrupted("approve", old.version))
        assert refusal is not None
        assert (refusal.run_id, refusal.stored, refusal.current) == ("r1", old.version, new.version)
        assert str(refusal).startswith(f"run r1 was started under flow version {old.version}")
    finally:
        engine.store.close()


#: a flow waiting for signal ``paid`` keyed by its order, after a first step
SIGNAL_FLOW = """
from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Order(BaseModel):
    key: str
    paid: dict | None = None


pay = (
    FlowBuilder("pay", Order, version="1")
    .step("{first}", lambda s: {{}})
    .wait_signal("payment", "paid", key=lambda s: s.key, into="paid")
    .chain()
    .compile()
)
"""


def test_a_signal_to_a_run_whose_flow_changed_says_it_cannot_take_it(tmp_path: Path) -> None:
    """The signal's mailbox line said the first process that runs the flow
    takes it, "or resume RUN", which refuses a run whose flow's code
    changed since it started (a tryout). It says that run cannot take it
    while the code differs, with the `show` that says what works, as printed."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "pay_flows.py").write_text(SIGNAL_FLOW.format(first="prep"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWDESK_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))
    env["FLOWDESK_FLOWS"] = '["pay_flows:pay"]'
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "pay", "--input", '{"key": "k1"}', env=env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    (code / "pay_flows.py").write_text(SIGNAL_FLOW.format(first="prepare"))  # a step renamed
    for cached in (code / "__pycache__").glob("pay_flows.*"):
        cached.unlink()
    sent = flowdesk(db, "signal", "paid", "k1", env=env)
    assert sent.returncode == 0, sent.stderr
    said = re.search(
        rf"run {run_id} cannot take it while its flow's code is not the one it started with: "
        r"`(flowdesk [^`]+)` says what works on it",
        sent.stderr,
    )
    assert said is not None, sent.stderr
    shown = as_printed(said.group(1), env)
    assert shown.returncode == 0 and "version" in shown.stdout, shown.stdout
