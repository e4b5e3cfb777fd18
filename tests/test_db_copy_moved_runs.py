"""After ``db copy``, the file's unfinished runs are marked moved: nothing on
the file executes them again, while a worker on PostgreSQL completes them.

The hole it closes: a run left interrupted (or waiting) in the file could be
resumed on the laptop (``resume``, the app's launch recovery, ``flowdesk
agent`` on the file, an answer, a signal) while PostgreSQL workers ran the
copy, so its steps ran in both places. Every executing path on the file now
refuses it, saying where it moved, with the command that shows it there
(run here as printed); steps are counted once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.errors import redact
from tests.cli_support import as_printed, flowdesk, spawn
from tests.line_racer import CLI_RACER, LineRacer
from tests.test_db_copy_live_runs import (
    _env,
    _log,
    _pg_clear,
    _pg_runs,
    _steps,
    _wait_for,
)
from tests.test_db_copy_moved_thread_race import _copy_file

FLOWS = (
    '["tests.test_db_copy_live_runs:gate", "tests.test_db_copy_moved_runs:asker", '
    '"tests.test_db_copy_moved_runs:waiter"]'
)


class W(BaseModel):
    answer: str | None = None
    got: dict | None = None


def _after_ask(state: W) -> dict:
    _log("after_ask")
    return {}


def _after_sig(state: W) -> dict:
    _log("after_sig")
    return {}


def _flows():
    from desktop_app.flow import FlowBuilder

    ask = (
        FlowBuilder("asker", W)
        .await_input("ask", "answer", "go on?")
        .step("after_ask", _after_ask)
        .chain()
        .compile()
    )
    wait = (
        FlowBuilder("waiter", W)
        .wait_signal("wait", "go", "k1", into="got")
        .step("after_sig", _after_sig)
        .chain()
        .compile()
    )
    return ask, wait


asker, waiter = _flows()


def _env_all(folder: Path) -> dict[str, str]:
    return {**_env(folder), "FLOWDESK_FLOWS": FLOWS}


def _file_runs(db: Path) -> dict[str, tuple[str, str | None]]:
    import sqlite3

    with sqlite3.connect(db) as lite:
        rows = lite.execute("SELECT run_id, status, lease_owner FROM runs").fetchall()
    lite.close()
    return {str(r): (str(s), o) for r, s, o in rows}


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.scenario("S69")
def test_after_db_copy_no_path_on_the_file_executes_a_moved_run_and_postgres_completes_it(
    tmp_path: Path, pg_url: str
) -> None:
    folder = tmp_path / "gate"
    folder.mkdir()
    env = _env_all(folder)
    db = tmp_path / "laptop.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    # an interrupted run: its process killed mid-step
    live = spawn("--db", str(db), "start", "gate", "--input", "{}", env=env)
    assert live.stdout is not None
    interrupted = live.stdout.readline().strip()
    _wait_for(folder / "started-*", live)
    live.kill()
    live.communicate(timeout=60)
    # a run waiting for an answer and one waiting for a signal
    asked = flowdesk(db, "start", "asker", "--input", "{}", env=env)
    assert asked.returncode == 0, asked.stderr
    waits = flowdesk(db, "start", "waiter", "--input", "{}", env=env)
    assert waits.returncode == 0, waits.stderr
    ask_id, wait_id = asked.stdout.split()[0], waits.stdout.split()[0]
    moved = sorted([interrupted, ask_id, wait_id])

    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=env)
    assert copied.returncode == 0, copied.stderr
    assert f"marked 3 unfinished runs moved in {db}: no process on it executes them" in (
        copied.stdout
    )
    where = redact(pg_url, mask=None)
    said = f"moved to {where} (flowdesk db copy)"
    (folder / "release").touch()  # the held step may finish now: wherever it runs, it is logged

    # every executing path on the file refuses, saying where the run moved
    resumed = flowdesk(db, "resume", interrupted, env=env)
    assert resumed.returncode == 1 and f"run {interrupted} {said}" in resumed.stderr
    hint = resumed.stderr.split("see it there: ", 1)[1].splitlines()[0]
    assert hint == f"flowdesk --db {where} show {interrupted}"
    for argv in (
        ("answer", ask_id, "yes"),
        # waiting for a signal: no "send it with" on the file (a tryout's was refused)
        ("answer", wait_id, "yes"),
        ("signal", "go", "k1", "--payload", "{}"),
        ("cancel", interrupted),
        ("cancel", ask_id),
    ):
        out = flowdesk(db, *argv, env=env)
        text = out.stdout + out.stderr
        assert out.returncode == 1 and said in text, (argv, text)
        assert "send it with" not in text and f"--db {db}" not in text, (argv, text)
        assert _steps(folder) == ["hold"], (argv, text)
    refused = flowdesk(db, "answer", wait_id, "yes", env=env)
    see = refused.stderr.split("see it there: ", 1)[1].splitlines()[0]
    assert see == f"flowdesk --db {where} show {wait_id}"
    assert as_printed(see, env).returncode == 0
    sent = flowdesk(db, "signal", "go", "k1", "--payload", "{}", env=env)
    assert f"the signal was not stored here: the run waits for it at {where}" in sent.stderr
    everything = flowdesk(db, "resume", "--all", env=env)
    assert everything.returncode == 0, everything.stderr
    assert f"run {interrupted} not resumed here: run {interrupted} {said}" in everything.stdout
    assert f"  see it there: flowdesk --db {where} show {interrupted}" in everything.stdout
    agent = spawn("--db", str(db), "agent", "--poll", "0.1", env=env)
    try:
        assert agent.stderr is not None
        seen: set[str] = set()
        for line in agent.stderr:
            for rid in moved:
                if f"run {rid} moved to {where} by flowdesk db copy; not executed" in line:
                    seen.add(rid)
            if seen == set(moved):
                break
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=60)
    assert agent.returncode == 0
    assert _steps(folder) == ["hold"]
    runs = flowdesk(db, "runs", env=env)
    assert sorted(ln.split()[0] for ln in runs.stdout.splitlines() if " moved " in ln) == moved
    # waiting lists them apart, with where to see them and no answer that would be refused
    waiting = flowdesk(db, "waiting", env=env)
    assert waiting.returncode == 0, waiting.stderr
    assert waiting.stdout.splitlines()[0] == "no waiting runs"
    assert sorted(waiting.stdout.splitlines()[1:]) == sorted(
        f"run {r} moved to {where} by flowdesk db copy while it waited: it is answered "
        f"there, not here (see it there: flowdesk --db {where} show {r})"
        for r in (ask_id, wait_id)
    )
    # --status moved selects them, and only them; no other status finds them
    only = flowdesk(db, "runs", "--status", "moved", "--json", env=env)
    assert only.returncode == 0, only.stderr
    assert sorted(json.loads(ln)["run_id"] for ln in only.stdout.splitlines()) == moved
    for other in ("waiting", "running", "interrupted"):
        listed = flowdesk(db, "runs", "--status", other, "--json", env=env)
        assert listed.returncode == 0 and listed.stdout == "", (other, listed)
    shown = flowdesk(db, "show", wait_id, env=env)
    assert "status moved" in shown.stdout and f"moved to {where} by flowdesk db copy" in (
        shown.stdout
    )
    # nothing changed them in the file: still as the copy found them
    assert {r: s for r, (s, _) in _file_runs(db).items()} == {
        interrupted: "running",
        ask_id: "waiting",
        wait_id: "waiting",
    }
    import sqlite3

    with sqlite3.connect(db) as lite:  # the refused signal was not stored
        assert lite.execute("SELECT count(*) FROM signals").fetchone() == (0,)
    lite.close()

    # the hint, run as printed, shows the run there
    there = as_printed(hint, {**os.environ, **env})
    assert there.returncode == 0, there.stderr
    assert f"run {interrupted}" in there.stdout

    # a worker on PostgreSQL completes all three
    worker = spawn("--db", pg_url, "agent", "--poll", "0.1", env=env)
    try:
        answered = flowdesk(pg_url, "answer", ask_id, "yes", env=env)
        assert answered.returncode == 0, answered.stderr
        sent = flowdesk(pg_url, "signal", "go", "k1", "--payload", "{}", env=env)
        assert sent.returncode == 0, sent.stderr
        assert worker.stderr is not None
        for line in worker.stderr:
            if f"run {interrupted} completed" in line:
                break
        while sorted(s for _, s in _pg_runs(pg_url)) != ["completed"] * 3:
            assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    # each step once (the held one twice: killed, then on the worker); never on the laptop
    assert sorted(_steps(folder)) == ["after", "after_ask", "after_sig", "hold", "hold"]
    assert _file_runs(db)[interrupted][0] == "running"


@pytest.mark.slow
@pytest.mark.postgres
def test_db_copy_racing_a_resume_on_the_file_runs_each_step_once(
    tmp_path: Path, pg_url: str
) -> None:
    """``db copy`` and ``resume RUN`` on the file released together, 20
    rounds, then a worker on PostgreSQL: either the resume ran the run on the
    laptop first (the copy refused it, or copied it ended), or the copy
    marked it moved and the resume refused; its steps ran once either way.

    The interrupted run (its ``start`` killed mid-step) is made once and its
    file (with the step log) copied per round; the copy and the resume are
    each a process kept across rounds (tests/cli_racer.py), running the
    command's entry point."""
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection

    proto = tmp_path / "proto"
    proto.mkdir()
    env = _env(proto)
    conn = open_connection(proto / "laptop.db")
    migrations.apply(conn)
    conn.close()
    live = spawn("--db", str(proto / "laptop.db"), "start", "gate", "--input", "{}", env=env)
    assert live.stdout is not None
    rid = live.stdout.readline().strip()
    _wait_for(proto / "started-*", live)
    live.kill()
    live.communicate(timeout=60)
    assert _steps(proto) == ["hold"]
    racers = {what: LineRacer(CLI_RACER, env={**os.environ, **env}) for what in ("resume", "copy")}
    outcomes = {"copied-then-refused": 0, "resumed-first": 0}
    try:
        for round_ in range(20):
            folder = tmp_path / f"r{round_}"
            folder.mkdir()
            env = _env(folder)
            db = folder / "laptop.db"
            _copy_file(proto / "laptop.db", db)
            shutil.copy(proto / "steps.log", folder / "steps.log")
            _pg_clear(pg_url)
            (folder / "release").touch()
            go = folder / "go"
            argv = {
                "resume": ["--db", str(db), "resume", rid],
                "copy": ["--db", str(db), "db", "copy", "--from", str(db), "--to", pg_url],
            }
            # the resume starts 0-225 ms after the copy: before, during and after its mark
            delay = {"resume": round_ % 10 * 0.025, "copy": 0.0}
            for what, racer in racers.items():
                racer.task(
                    round_, go=str(go), do="cli", args=argv[what], env=env, delay=delay[what]
                )
            go.touch()
            resumed, copied = racers["resume"].told(round_), racers["copy"].told(round_)
            r_out, r_err = resumed["out"], resumed["err"]
            c_out, c_err = copied["out"], copied["err"]
            there = _pg_runs(pg_url)
            if resumed["code"] == 0:  # the laptop ran it: the copy has it ended, or nothing
                assert "completed" in r_out, r_out + r_err
                assert there in ([], [(rid, "completed")]), (there, c_out, c_err)
                outcomes["resumed-first"] += 1
            else:  # the copy marked it first: the resume ran nothing
                assert "moved to" in r_err, r_out + r_err
                assert copied["code"] == 0, c_err
                assert there == [(rid, "running")]
                worker = spawn("--db", pg_url, "agent", "--poll", "0.1", env=env)
                try:
                    assert worker.stderr is not None
                    for line in worker.stderr:
                        if f"run {rid} completed" in line:
                            break
                finally:
                    worker.send_signal(signal.SIGTERM)
                    worker.communicate(timeout=60)
                outcomes["copied-then-refused"] += 1
            # the killed attempt, then exactly one full run: on the laptop or on the worker
            assert _steps(folder) == ["hold", "hold", "after"], (r_out, r_err, c_out, c_err)
        for racer in racers.values():
            racer.close()
    finally:
        for racer in racers.values():
            if racer.proc.poll() is None:
                racer.proc.kill()
                racer.proc.communicate(timeout=60)
    assert sum(outcomes.values()) == 20, outcomes
    print(outcomes)
