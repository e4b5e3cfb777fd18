"""``flowdesk signal`` as a new user met it: a payload the waiting run cannot
take blocked the run for good (it failed on it, a good signal after it was
kept, ``resume`` failed again on the same stored payload), and ``signal``
named runs it did not reach (two runs waited for one key; one signal woke
one of them). One signal is taken by one wait (a durable mailbox, as a
Temporal signal goes to one workflow execution): ``signal`` now refuses a
payload the waiting run cannot take before storing it (exit 2), a wait
that meets one stored anyway refuses it and goes on waiting (as Temporal's
SDKs drop a signal they cannot decode), and ``signal`` says which run took
it and which still wait, with the command that sends one for them, run
here as printed. The real CLI in subprocesses, on a SQLite file and on
PostgreSQL.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.cli_support import as_printed, flowdesk, user_db

FLOWS = '["desktop_app.examples.approval:approval"]'


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return user_db(request, tmp_path, _env())


def _env() -> dict[str, str]:
    return {**os.environ, "FLOWDESK_FLOWS": FLOWS}


def fd(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return flowdesk(db, *args, env=_env())


def signals(db: str) -> list[tuple[int, str, str | None]]:
    """``(signal_id, payload, consumed_by)`` of every stored signal, oldest first."""
    query = "SELECT signal_id, payload, consumed_by FROM {}signals ORDER BY signal_id"
    if db.startswith("postgresql"):
        import psycopg

        with psycopg.connect(db) as conn:  # Flowdesk's tables are in schema flowdesk
            rows = conn.execute(query.format("flowdesk.")).fetchall()
            return [(int(a), str(b), c) for a, b, c in rows]
    with sqlite3.connect(db) as conn:
        return [(int(a), str(b), c) for a, b, c in conn.execute(query.format("")).fetchall()]


def status(db: str, run_id: str) -> str:
    shown = fd(db, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.split("status ", 1)[1].split()[0]


def approved(db: str, order: str) -> str:
    """A run of the example flow, answered yes: it waits for ``paid ORDER``."""
    started = fd(db, "start", "approval", "--input", f'{{"order": "{order}"}}')
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    answered = fd(db, "answer", run_id, "yes")
    assert answered.returncode == 0 and answered.stdout.strip() == f"run {run_id} waiting"
    return run_id


@pytest.mark.scenario("S99")
def test_a_payload_the_waiting_run_cannot_take_is_refused_before_it_is_stored(db: str) -> None:
    run_id = approved(db, "o-1")

    bad = fd(db, "signal", "paid", "o-1", "--payload", "[1,2]")

    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert bad.stdout == ""
    assert bad.stderr.strip() == (
        f"flowdesk: signal 'paid' with key 'o-1' was not sent: run {run_id} waits for it at "
        "step 'payment', which takes a payload of type dict[str, Any] | None; [1,2] does not "
        "fit: Input should be a valid dictionary. Nothing was stored; send a payload of type "
        "dict[str, Any] | None"
    )
    assert signals(db) == []  # nothing stored
    assert status(db, run_id) == "waiting"
    good = fd(db, "signal", "paid", "o-1", "--payload", '{"amount": 3}')
    assert good.returncode == 0, good.stderr
    assert good.stdout.splitlines() == [
        "signal 1 stored",
        f"delivered to run {run_id} (now completed)",
    ]
    assert good.stderr == ""
    assert signals(db) == [(1, '{"amount":3}', f"{run_id}:payment:0")]


@pytest.mark.scenario("S99")
def test_a_bad_signal_stored_before_the_run_waited_is_refused_and_the_run_keeps_waiting(
    db: str,
) -> None:
    early = fd(db, "signal", "paid", "o-1", "--payload", "[1,2]")
    assert early.returncode == 0 and early.stdout.strip() == "signal 1 stored"
    assert "no run waits for signal 'paid' with key 'o-1' now" in early.stderr

    run_id = approved(db, "o-1")  # its wait meets [1,2]: refused, still waiting

    wait_id = f"{run_id}:payment:0"
    assert signals(db) == [(1, "[1,2]", wait_id)]  # refused: no wait meets it again
    shown = fd(db, "show", run_id).stdout
    assert "status waiting" in shown
    assert (
        "refused signals (their payload did not fit; the run went on waiting):\n"
        f"  signal 1 (wait {wait_id}): field 'paid' (dict[str, Any] | None): [1,2] does not "
        "fit: Input should be a valid dictionary\n"
    ) in shown
    assert "--payload JSON, of type dict[str, Any] | None (another is refused)" in shown
    hint = next(x for x in shown.splitlines() if "send it with: " in x).split("with: ", 1)[1]
    assert hint == f"flowdesk --db {db} signal paid o-1"
    sent = as_printed(hint + " --payload '{\"amount\": 3}'", _env())
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.splitlines()[1] == f"delivered to run {run_id} (now completed)"
    assert status(db, run_id) == "completed"


@pytest.mark.scenario("S99")
def test_one_signal_reaches_one_of_two_waiting_runs_and_says_which(db: str) -> None:
    first, second = approved(db, "o-11"), approved(db, "o-11")

    sent = fd(db, "signal", "paid", "o-11", "--payload", '{"a": 1}')

    assert sent.returncode == 0, sent.stderr
    lines = sent.stdout.splitlines()
    assert lines[0] == "signal 1 stored"
    taker = lines[1].split("delivered to run ", 1)[1].split()[0]
    other = second if taker == first else first
    assert {taker, other} == {first, second}
    assert lines[1] == f"delivered to run {taker} (now completed)"
    hint = f"flowdesk --db {db} signal paid o-11 --payload '{{\"a\": 1}}'"
    assert lines[2] == (
        f"1 other run still waits for signal 'paid' with key 'o-11': {other}; a signal is "
        f"taken by one wait, so send one for each: {hint}"
    )
    assert (status(db, taker), status(db, other)) == ("completed", "waiting")
    again = as_printed(hint, _env())
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "signal 2 stored",
        f"delivered to run {other} (now completed)",
    ]
    assert status(db, other) == "completed"
    assert signals(db) == [
        (1, '{"a":1}', f"{taker}:payment:0"),
        (2, '{"a":1}', f"{other}:payment:0"),
    ]


@pytest.mark.scenario("S99")
def test_a_run_an_older_version_failed_on_a_bad_signal_resumes_and_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that failed on a stored bad signal, as this version did (its
    wait took any signal and failed the step on the payload): the ``resume``
    it printed could only fail again. Now it works: the new wait refuses
    the signal and waits, the hint it prints shows why, and a good signal
    completes the run."""
    from desktop_app.examples.approval import approval
    from desktop_app.flow import Engine, waiting
    from desktop_app.store.sqlite.store import open_store

    db = str(tmp_path / "b.db")
    assert fd(db, "db", "apply").returncode == 0
    started = fd(db, "start", "approval", "--input", '{"order": "o-1"}')
    run_id = started.stdout.splitlines()[0]
    store = open_store(Path(db))
    engine = Engine(store, flows=[approval])
    store.send_signal("paid", "o-1", [1, 2], engine.clock.now())
    with monkeypatch.context() as old:
        old.setattr(waiting, "_unfit", lambda *a: None)  # the older version's wait
        assert engine.resume_with(run_id, "yes").status == "failed"
    store.close()
    assert "WaitPayloadError" in fd(db, "show", run_id).stdout
    assert signals(db) == [(1, "[1,2]", None)]  # kept, and met again by every resume

    resumed = as_printed(f"flowdesk --db {db} resume {run_id}", _env())  # its old hint

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.strip() == f"run {run_id} waiting"
    assert signals(db) == [(1, "[1,2]", f"{run_id}:payment:1")]
    hint = resumed.stderr.strip().split("answers it: ", 1)[1]
    shown = as_printed(hint, _env())
    assert f"  signal 1 (wait {run_id}:payment:1): field 'paid'" in shown.stdout
    good = fd(db, "signal", "paid", "o-1", "--payload", '{"amount": 3}')
    assert good.stdout.splitlines()[1] == f"delivered to run {run_id} (now completed)"


@pytest.mark.scenario("S99")
def test_a_signal_from_a_process_without_the_flow_is_kept_and_a_bad_one_refused_later(
    tmp_path: Path,
) -> None:
    """``signal`` from a process that does not register the waiting run's
    flow cannot judge the payload nor deliver it: it stores it and says the
    run waits for it, with the command that lists what runs wait for (run
    as printed). The process that runs the flow refuses the bad payload and
    the run goes on waiting."""
    db = str(tmp_path / "b.db")
    assert fd(db, "db", "apply").returncode == 0
    run_id = approved(db, "o-1")
    bare = {k: v for k, v in os.environ.items() if k != "FLOWDESK_FLOWS"}

    sent = flowdesk(db, "signal", "paid", "o-1", "--payload", "[1,2]", env=bare)

    assert sent.returncode == 0, sent.stderr
    hint = f"flowdesk --db {db} waiting"
    assert sent.stdout.splitlines() == [
        "signal 1 stored",
        f"kept in the mailbox: 1 run waits for it ({run_id}) and none took it here now; the "
        "first one woken by a process that runs its flow takes it (flowdesk agent, the app, "
        f"or resume RUN; what they wait for: {hint})",
    ]
    listed = as_printed(hint, bare)
    assert listed.returncode == 0 and f"{run_id}:payment:0  signal paid o-1" in listed.stdout
    assert signals(db) == [(1, "[1,2]", None)]
    resumed = fd(db, "resume", run_id)
    assert resumed.returncode == 0 and resumed.stdout.strip() == f"run {run_id} waiting"
    assert signals(db) == [(1, "[1,2]", f"{run_id}:payment:0")]
    assert "  signal 1 (wait " in fd(db, "show", run_id).stdout
    shown = json.loads(fd(db, "show", run_id, "-o", "json").stdout)
    assert shown["refused_signals"] == [
        {
            "signal": 1,
            "wait": f"{run_id}:payment:0",
            "reason": "field 'paid' (dict[str, Any] | None): [1,2] does not fit: "
            "Input should be a valid dictionary",
        }
    ]


@pytest.mark.slow
@pytest.mark.scenario("S99")
def test_two_signals_sent_at_once_to_two_waiting_runs_are_reported_as_they_were_taken(
    tmp_path: Path,
) -> None:
    """Two ``signal`` processes released at one instant, each sending one
    signal for the key two runs wait on, 20 rounds (a file each): each
    command's report is what the mailbox recorded (``delivered to run R``
    names the run whose wait took its signal, never one that did not; a
    signal no wait took is reported kept with the run that still waits),
    no signal is taken twice, and ``resume --all`` then completes every
    run with one signal each."""
    from desktop_app.examples.approval import approval
    from desktop_app.flow import Engine
    from desktop_app.store.sqlite.store import open_store
    from tests.line_racer import CLI_RACER, LineRacer

    racers = [LineRacer(CLI_RACER, env=_env()) for _ in range(2)]
    outcomes = {"both taken": 0, "one kept": 0}
    try:
        for round_ in range(20):
            db = str(tmp_path / f"r{round_}.db")
            assert fd(db, "db", "apply").returncode == 0
            store = open_store(Path(db))
            engine = Engine(store, flows=[approval])
            runs = set()
            for _ in range(2):
                run_id = engine.run("approval", {"order": "o-1"}).run_id
                assert engine.resume_with(run_id, "yes").status == "waiting"
                runs.add(run_id)
            store.close()
            go = str(tmp_path / f"go{round_}")
            for i, racer in enumerate(racers):
                args = ["--db", db, "signal", "paid", "o-1", "--payload", f'{{"n": {i}}}']
                racer.task(round_, go=go, do="cli", args=args, env=_env())
            Path(go).touch()
            told = [racer.told(round_) for racer in racers]
            rows = {payload: consumer for _, payload, consumer in signals(db)}
            assert len(rows) == 2, rows
            for i, said in enumerate(told):
                assert said["code"] == 0, said
                lines = said["out"].splitlines()
                consumer = rows[f'{{"n":{i}}}']
                if consumer is None:
                    assert lines[1].startswith("kept in the mailbox: 1 run waits for it ("), said
                else:
                    took = consumer.split(":", 1)[0]
                    assert took in runs
                    # the run may still be running in the other process, which took it
                    assert lines[1].startswith(f"delivered to run {took} (now "), said
                assert said["err"] == "", said
            taken = [c for c in rows.values() if c is not None]
            assert len(set(taken)) == len(taken)  # no wait took two signals
            outcomes["both taken" if len(taken) == 2 else "one kept"] += 1
            finished = fd(db, "resume", "--all")
            assert finished.returncode == 0, finished.stdout + finished.stderr
            assert {status(db, r) for r in runs} == {"completed"}
            assert all(c is not None for _, _, c in signals(db))
        for racer in racers:
            racer.close()
    finally:
        for racer in racers:
            if racer.proc.poll() is None:
                racer.proc.kill()
                racer.proc.communicate(timeout=60)
    assert sum(outcomes.values()) == 20, outcomes
    print(outcomes)  # how the rounds went (-s shows it)
