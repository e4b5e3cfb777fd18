"""SIGTERM on the ``flowdesk agent`` that executes a step, with a second
worker on the same database (a new user's report: the stopping worker
released the run's lease at once, so its peer ran the step in flight a
second time, at the same moment). Real processes on a real SQLite file and
a real PostgreSQL server; the step's side effect is a line in a file, and
the test counts them.

The README's promise: ``flowdesk agent`` exits cleanly on SIGTERM, the step
in flight finishes (and its side effect is made once) or stays
``in_progress`` for the next start; a peer never runs it while the stopping
worker may still run it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests import cli_forkserver, sigterm_flows
from tests.cli_support import REPO, as_printed, flowdesk

BOUND_S = 90.0  # upper bound on any wait (shared, loaded CPUs)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        db = tmp_path / "flowdesk.db"
        assert flowdesk(db, "db", "apply").returncode == 0
        return str(db)
    url: str = request.getfixturevalue("pg_url")
    return url


def open_db(database: str):
    if database.startswith("postgresql://"):
        from desktop_app.store.postgres.store import open_postgres_store

        return open_postgres_store(database)
    from desktop_app.store.sqlite.store import open_store

    return open_store(Path(database))


class Agent:
    """A ``flowdesk --db DB agent`` process, its stderr in a file."""

    def __init__(self, database: str, err: Path, *extra: str) -> None:
        self.err = err
        env = {**os.environ, "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV}
        argv = ["--db", database, "agent", "--poll", "0.2", *extra]
        with err.open("w") as out:
            self.popen = cli_forkserver.popen(
                [sys.executable, "-m", "desktop_app.cli", *argv],
                stdout=subprocess.DEVNULL,
                stderr=out,
                cwd=REPO,
                env=env,
            )
        wait_for(lambda: "flowdesk agent:" in self.text(), f"{err.name}: no start line")

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.err.read_text()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=30)


def owner(agent: Agent) -> str:
    """The lease owner id ``flowdesk agent`` printed when it started."""
    first = agent.text().splitlines()[0]
    found = re.match(r"flowdesk agent: (?:worker (\S+) on|serving .* as (\S+)$)", first)
    assert found, first
    return found.group(1) or found.group(2)


def wait_for(pred, what: str, bound: float = BOUND_S) -> None:
    deadline = time.monotonic() + bound
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def lines(sink: Path) -> list[list[str]]:
    return [x.split() for x in sink.read_text().splitlines()] if sink.exists() else []


def submit(database: str, sink: Path, gate: Path) -> str:
    from desktop_app.flow import Engine

    store = open_db(database)
    try:
        engine = Engine(store, flows=[sigterm_flows.effects])
        return engine.start("effects", {"sink": str(sink), "gate": str(gate)})
    finally:
        store.close()


def status(database: str, run_id: str) -> str:
    store = open_db(database)
    try:
        return store.get_run(run_id).status
    finally:
        store.close()


@pytest.mark.slow
def test_sigterm_lets_the_step_in_flight_finish_and_a_peer_goes_on_after_it(
    database: str, tmp_path: Path
) -> None:
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    a = Agent(database, tmp_path / "a.err")
    b = None
    try:
        run_id = submit(database, sink, gate)
        wait_for(lambda: ["begin", "s1", "1", str(a.pid)] in lines(sink), "a never began s1")
        b = Agent(database, tmp_path / "b.err")
        a.popen.send_signal(signal.SIGTERM)
        wait_for(lambda: "SIGTERM, stopping" in a.text(), "a never heard SIGTERM")
        # A peer that took the run over now would begin s1 within its poll
        # (0.2 s); give it ten times that before the step in flight goes on.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not any(
            w[:2] == ["begin", "s1"] and w[3] == str(b.pid) for w in lines(sink)
        ):
            time.sleep(0.05)
        gate.touch()
        assert a.popen.wait(timeout=BOUND_S) == 0, a.text()
        wait_for(lambda: status(database, run_id) == "completed", "the run never completed")
    finally:
        a.stop()
        if b is not None:
            b.stop()
    effects = [w for w in lines(sink) if w[0] == "effect"]
    assert Counter(w[1] for w in effects) == dict.fromkeys(sigterm_flows.STEPS, 1), effects
    by = {w[1]: int(w[2]) for w in effects}
    assert by["s0"] == by["s1"] == a.pid  # the step in flight finished where it ran
    assert by["s2"] == by["s3"] == b.pid  # the peer went on after it
    assert not any(w[:2] == ["begin", "s1"] and w[3] == str(b.pid) for w in lines(sink))


def test_a_step_still_running_after_the_grace_keeps_its_lease_and_a_peer_runs_it_once(
    database: str, tmp_path: Path
) -> None:
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    a = Agent(database, tmp_path / "a.err", "--grace", "1")
    b = None
    try:
        run_id = submit(database, sink, gate)
        wait_for(lambda: ["begin", "s1", "1", str(a.pid)] in lines(sink), "a never began s1")
        b = Agent(database, tmp_path / "b.err")
        a.popen.send_signal(signal.SIGTERM)
        assert a.popen.wait(timeout=BOUND_S) == 1, a.text()
        said = a.text()
        assert f"exiting 1 s after the signal; runs still executing a step: {run_id}" in said
        assert "keeps its lease" in said
        # gone, it is taken over: the step cut off runs again there, once
        wait_for(
            lambda: ["begin", "s1", "2", str(b.pid)] in lines(sink), "b never took the run over"
        )
        gate.touch()
        wait_for(lambda: status(database, run_id) == "completed", "the run never completed")
    finally:
        a.stop()
        if b is not None:
            b.stop()
    effects = [w for w in lines(sink) if w[0] == "effect"]
    assert Counter(w[1] for w in effects) == dict.fromkeys(sigterm_flows.STEPS, 1), effects
    assert [w[2] for w in effects if w[1] == "s1"] == [str(b.pid)]
    # the log names the run and the owner it was taken from (README, Tracing and logs)
    logged = (Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log").read_text()
    took = f"run {run_id}: {owner(b)} takes it over from {owner(a)} (owner gone)"
    assert took in logged, logged[-3000:]


def test_a_second_signal_exits_at_once_saying_so_and_the_run_keeps_its_lease(
    database: str, tmp_path: Path
) -> None:
    """The stop's hint says "signal again to exit now": the second signal
    exits 1 at once, saying it exits on that signal and which run keeps its
    lease ("exiting a second signal" lacked its "on")."""
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    a = Agent(database, tmp_path / "a.err", "--grace", "600")
    try:
        run_id = submit(database, sink, gate)
        wait_for(lambda: ["begin", "s1", "1", str(a.pid)] in lines(sink), "a never began s1")
        a.popen.send_signal(signal.SIGTERM)
        wait_for(lambda: "signal again to exit now" in a.text(), "a never heard SIGTERM")
        a.popen.send_signal(signal.SIGINT)
        assert a.popen.wait(timeout=BOUND_S) == 1, a.text()
        said = a.text()
        assert (
            "flowdesk agent: exiting on a second SIGINT; runs still executing a step: "
            f"{run_id}; each keeps its lease"
        ) in said
    finally:
        gate.touch()
        a.stop()


def test_a_stopped_agent_names_the_run_it_left_unfinished_and_its_command_finishes_it(
    database: str, tmp_path: Path
) -> None:
    """A new user's report: SIGTERM on an agent executing a run exited 0 and
    said nothing of the run it left unfinished. It names the run, what
    takes it further, and a command that finishes it, run here as printed."""
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    a = Agent(database, tmp_path / "a.err")
    try:
        run_id = submit(database, sink, gate)
        wait_for(lambda: ["begin", "s1", "1", str(a.pid)] in lines(sink), "a never began s1")
        a.popen.send_signal(signal.SIGTERM)
        wait_for(lambda: "SIGTERM, stopping" in a.text(), "a never heard SIGTERM")
        gate.touch()
        assert a.popen.wait(timeout=BOUND_S) == 0, a.text()
    finally:
        a.stop()
    said = a.text()
    found = re.search(
        rf"flowdesk agent: run {run_id} \(effects\) stopped before its next step, not "
        r"finished; a `flowdesk agent` serving this database goes on with it, or run "
        r"`(flowdesk [^`]+)` to continue now\n",
        said,
    )
    assert found is not None, said
    assert found.group(1) == f"flowdesk --db {database} resume {run_id}"
    assert status(database, run_id) == "running"  # left as said: unfinished, held by nobody
    env = {**os.environ, "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV}
    resumed = as_printed(found.group(1), env, timeout=BOUND_S)
    assert resumed.returncode == 0, resumed.stderr
    assert status(database, run_id) == "completed"
    effects = [w for w in lines(sink) if w[0] == "effect"]
    assert Counter(w[1] for w in effects) == dict.fromkeys(sigterm_flows.STEPS, 1), effects


def test_an_agent_stopped_with_nothing_in_flight_names_no_run(tmp_path: Path) -> None:
    """The line is for runs left unfinished only: a run that completed
    under the agent before the signal is not named."""
    db = tmp_path / "flowdesk.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    gate.touch()
    a = Agent(str(db), tmp_path / "a.err")
    try:
        run_id = submit(str(db), sink, gate)
        wait_for(lambda: f"run {run_id} completed" in a.text(), "the run never completed")
        a.popen.send_signal(signal.SIGTERM)
        assert a.popen.wait(timeout=BOUND_S) == 0, a.text()
    finally:
        a.stop()
    assert "stopped before its next step" not in a.text(), a.text()


def test_a_run_whose_recovery_is_ask_is_named_without_promising_an_agent_resumes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``recovery = {signaled = "ask"}``: `flowdesk agent` resumes no such
    run, so the line does not say one will; its command finishes it. (The
    agent executes it only because a signal it delivered woke it.)"""
    from desktop_app.flow import Engine

    monkeypatch.setenv("FLOWDESK_RECOVERY__SIGNALED", "ask")
    db = tmp_path / "flowdesk.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    store = open_db(str(db))
    try:
        ran = Engine(store, flows=[sigterm_flows.signaled]).run(
            "signaled", {"sink": str(sink), "gate": str(gate)}
        )
    finally:
        store.close()
    assert ran.status == "waiting", ran
    a = Agent(str(db), tmp_path / "a.err")
    try:
        assert flowdesk(db, "signal", "go", "k").returncode == 0
        wait_for(lambda: ["begin", "s1", "1", str(a.pid)] in lines(sink), "a never began s1")
        a.popen.send_signal(signal.SIGTERM)
        wait_for(lambda: "SIGTERM, stopping" in a.text(), "a never heard SIGTERM")
        gate.touch()
        assert a.popen.wait(timeout=BOUND_S) == 0, a.text()
    finally:
        a.stop()
    found = re.search(
        rf"flowdesk agent: run {ran.run_id} \(signaled\) stopped before its next step, not "
        r"finished; no `flowdesk agent` resumes it \(recovery\.signaled is 'ask' in the "
        r"settings\): run `(flowdesk [^`]+)` to continue\n",
        a.text(),
    )
    assert found is not None, a.text()
    env = {**os.environ, "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV}
    resumed = as_printed(found.group(1), env, timeout=BOUND_S)
    assert resumed.returncode == 0, resumed.stderr
    assert status(str(db), ran.run_id) == "completed"
    effects = [w[1] for w in lines(sink) if w[0] == "effect"]
    assert sorted(effects) == ["s0", "s1", "s2", "s3"], effects
