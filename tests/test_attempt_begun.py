"""Whether a step's attempt had begun is what decides, on resume, between
running a ``resume_only`` step's function and its ``on_recover``: an
attempt a crash may have cut recovers (its effect may have been made), one
that never began runs the function (nothing was made).

* A retry after a backoff begins: that is saved before its body runs. Before,
  the retry's record still said "not begun" (the backoff's
  ``next_retry_at``), so a crash inside the retry, after its effect, ran the
  function again on resume: a second charge.
* A run given back between steps (its engine stops, or an engine that does
  not execute hands an answered run to the workers): the next step's attempt
  has not begun. Before, it was resumed as if a crash had cut it: counted
  twice, and a ``resume_only`` step ran ``on_recover`` for an effect never
  attempted instead of making it.

Real SQLite files; the crash is a real process killing itself with SIGKILL.
"""

from __future__ import annotations

import signal
from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver

WORKER = Path(__file__).resolve().parent / "attempt_begun_worker.py"


def test_a_crash_inside_a_retry_recovers_the_resume_only_step_and_charges_once(db_path: Path):
    first = cli_forkserver.run_script(WORKER, [str(db_path), "first"], timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stderr
    effects = db_path.with_suffix(".effects")
    assert effects.read_text().splitlines() == ["charged"]  # the retry's effect, then the kill
    again = cli_forkserver.run_script(WORKER, [str(db_path), "again"], timeout=120)
    assert again.returncode == 0, again.stderr
    # the retry had begun: its effect is found out, not made again
    assert effects.read_text().splitlines() == ["charged", "recovered"]
    assert again.stdout.split() == ["completed", "3"]  # a failure, the cut retry, the recovery


def test_a_run_handed_to_the_workers_with_its_recovery_due_still_recovers(db_path: Path):
    """Resumed after the crash by an engine that does not execute (it hands
    the run to the workers): the recovery is still due, so the worker that
    resumes it finds out (``on_recover``) instead of charging again."""
    first = cli_forkserver.run_script(WORKER, [str(db_path), "first"], timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stderr
    handed = cli_forkserver.run_script(WORKER, [str(db_path), "handed"], timeout=120)
    assert handed.returncode == 0, handed.stderr
    assert handed.stdout.split()[0] == "running"  # given to the workers, nothing ran
    effects = db_path.with_suffix(".effects")
    assert effects.read_text().splitlines() == ["charged"]
    again = cli_forkserver.run_script(WORKER, [str(db_path), "again"], timeout=120)
    assert again.returncode == 0, again.stderr
    assert effects.read_text().splitlines() == ["charged", "recovered"]


class S(BaseModel):
    n: int = 0
    answer: str = ""


def _flow(log: list[str], first_stops: Engine | None = None):
    """``a`` then ``b`` (``resume_only``: ``fn`` makes the effect,
    ``on_recover`` finds out); with ``first_stops``, ``a`` stops that engine
    (as Ctrl-C or SIGTERM do) while it runs."""

    def a(s: S) -> dict:
        log.append("a")
        if first_stops is not None:
            first_stops.shutdown_event.set()
        return {"n": 1}

    def b(s: S) -> dict:
        log.append("b made the effect")
        return {"n": 2}

    def recover(s: S) -> dict:
        log.append("b recovered")
        return {"n": 3}

    return (
        FlowBuilder("ab", S)
        .step("a", a)
        .step("b", b, recovery="resume_only", on_recover=recover)
        .chain()
        .compile()
    )


def test_a_run_stopped_between_steps_makes_the_next_steps_effect_when_resumed(db_path: Path):
    log: list[str] = []
    stopping = Engine(open_store(db_path), group_commit=False)
    stopping.register(_flow(log, first_stops=stopping))
    r = stopping.run("ab", S())
    assert (r.status, log) == ("running", ["a"])  # stopped after a, before b
    stopping.store.close()

    resuming = Engine(open_store(db_path), flows=[_flow(log)], group_commit=False)
    done = resuming.resume(r.run_id)
    assert done.status == "completed" and done.state.n == 2
    assert log == ["a", "b made the effect"]  # not "b recovered": b had never begun
    assert resuming.store.latest(r.run_id).steps["b"].attempts == 1
    resuming.store.close()


def _asking_flow(log: list[str]):
    """A question (``ask``), then ``b`` (``resume_only``)."""

    def b(s: S) -> dict:
        log.append(f"b made the effect for {s.answer}")
        return {"n": 2}

    def recover(s: S) -> dict:
        log.append("b recovered")
        return {"n": 3}

    return (
        FlowBuilder("asks", S)
        .await_input("ask", "answer", "go?")
        .step("b", b, recovery="resume_only", on_recover=recover)
        .chain()
        .compile()
    )


def test_an_answer_handed_to_a_worker_makes_the_next_steps_effect_there(db_path: Path):
    """An engine that does not execute (the app on PostgreSQL beside
    workers) answers, then hands the run back: the worker that resumes it
    makes ``b``'s effect once, as its first attempt."""
    log: list[str] = []
    worker = Engine(open_store(db_path), flows=[_asking_flow(log)], group_commit=False)
    r = worker.run("asks", S())
    assert r.status == "waiting"
    answering = Engine(
        open_store(db_path), flows=[_asking_flow(log)], group_commit=False, executes=False
    )
    handed = answering.resume_with(r.run_id, "yes")
    assert handed.status == "running" and log == []  # answered, not executed here
    answering.store.close()

    done = worker.resume(r.run_id)
    assert done.status == "completed" and done.state.n == 2
    assert log == ["b made the effect for yes"]
    assert worker.store.latest(r.run_id).steps["b"].attempts == 1
    worker.store.close()


def test_a_run_resumed_by_a_stopping_engine_makes_its_first_steps_effect_later(db_path: Path):
    """A submitted run (not begun) resumed by an engine already stopping
    (SIGTERM as it picks the run up) is given back before its first step
    runs: the next resume makes the step's effect, as its first attempt."""
    log: list[str] = []

    def charge(s: S) -> dict:
        log.append("charged")
        return {"n": 1}

    def recover(s: S) -> dict:
        log.append("recovered")
        return {"n": 2}

    def flow():
        return (
            FlowBuilder("one", S)
            .step("charge", charge, recovery="resume_only", on_recover=recover)
            .chain()
            .compile()
        )

    submitter = Engine(open_store(db_path), flows=[flow()], group_commit=False, executes=False)
    run_id = submitter.run("one", S()).run_id  # stored pending, for a worker
    submitter.store.close()
    stopping = Engine(open_store(db_path), flows=[flow()], group_commit=False)
    stopping.shutdown_event.set()
    assert stopping.resume(run_id).status == "running" and log == []
    stopping.store.close()

    worker = Engine(open_store(db_path), flows=[flow()], group_commit=False)
    done = worker.resume(run_id)
    assert done.status == "completed" and log == ["charged"]  # not "recovered"
    assert worker.store.latest(run_id).steps["charge"].attempts == 1
    worker.store.close()
