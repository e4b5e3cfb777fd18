"""A new user's tryout: a run whose own deadline (``deadline_s``) falls
before the timer it sleeps on was shown by ``show`` and ``waiting`` as
waiting for that timer "in 1m 12s" (``runs``: ``waiting``), with no word of
the deadline, before and after it passed; the engine times the run out at
its deadline, and ``flowdesk agent`` said nothing when it did. ``show`` and
``waiting`` say when the run's deadline falls, that the timer comes after
it, and, once it passed, that the next wake-up times the run out, with the
command that does it now, run here as printed; an engine that times a run
out at a wake-up publishes its end as for a driven run (the agent prints
it). Real SQLite files."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.events import RunFinished
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import as_printed, flowdesk
from tests.timer_flows import LIMIT_S, LIMITED_ENV, NAP_S, Order, limited, napper

ENV = {"FLOWDESK_FLOWS": LIMITED_ENV}


@pytest.mark.scenario("S113")
def test_show_and_waiting_say_the_runs_own_deadline_and_its_hint_times_it_out(
    db_path: Path,
) -> None:
    started = flowdesk(db_path, "start", "limited", "--input", json.dumps({"order": "o"}), env=ENV)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    created = time.time()

    before = flowdesk(db_path, "show", run_id, env=ENV).stdout
    [line] = [x for x in before.splitlines() if x.startswith("run deadline ")]
    assert line.endswith(": the run times out then, whatever it waits for"), line
    assert "after the run's own deadline (above): the run times out first" in before
    listed = flowdesk(db_path, "waiting", env=ENV).stdout
    assert "  run deadline " in listed and ", after the run's own: it times out first" in listed

    time.sleep(max(0.0, created + LIMIT_S + 0.5 - time.time()))
    after = flowdesk(db_path, "show", run_id, env=ENV)
    assert after.returncode == 0, after.stderr
    said = after.stdout.splitlines()
    at = said.index(next(x for x in said if x.startswith("run deadline ")))
    assert re.search(r", passed \S+ ago$", said[at]), said[at]
    assert said[at + 1] == (
        "  its deadline passed, so the next wake-up (`flowdesk resume`, a running `flowdesk "
        "agent` or the app) times the run out, whatever it waits for"
    )
    hint = said[at + 2].removeprefix("  time it out now with: ")
    assert hint == f"flowdesk --db {db_path} resume {run_id}", said[at + 2]
    assert "its deadline passed" in flowdesk(db_path, "waiting", env=ENV).stdout

    done = as_printed(hint, env={**ENV})
    assert f"run {run_id} timed_out" in done.stdout + done.stderr, (done.stdout, done.stderr)
    shown = json.loads(flowdesk(db_path, "show", run_id, "-o", "json", env=ENV).stdout)
    assert shown["status"] == "timed_out" and shown["error"].startswith("run deadline passed")
    ended = flowdesk(db_path, "show", run_id, env=ENV).stdout.splitlines()
    assert not any(x.startswith("run deadline ") for x in ended)  # it ended: no such line


@pytest.mark.scenario("S113")
def test_a_wake_that_times_a_run_out_publishes_its_end(db_path: Path) -> None:
    """What ``flowdesk agent`` prints its "run RUN timed_out" line from."""
    clock = ManualClock()
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[limited, napper], clock=clock)
        ended: list[RunFinished] = []
        engine.events.subscribe(lambda e: ended.append(e) if isinstance(e, RunFinished) else None)
        run = engine.run("limited", Order(order="o"))
        assert run.status == "waiting"
        ended.clear()  # the drive that left it waiting published its own
        clock.advance(LIMIT_S + 1)
        assert engine.tick() == 1
        assert [(e.run_id, e.status) for e in ended] == [(run.run_id, "timed_out")]
        stored = store.get_run(run.run_id)
        assert stored.status == "timed_out"
        assert ended[0].error == stored.error and (stored.error or "").startswith(
            "run deadline passed ("
        )  # what the agent prints after the run's end

        # a wake that does not end the run (its timer fired, it goes on) adds
        # no end of its own: the run's drive publishes the one it reaches
        napping = engine.run("napper", Order(order="n"))
        assert napping.status == "waiting"
        ended.clear()
        clock.advance(NAP_S + 1)
        assert engine.tick() == 1
        assert [(e.run_id, e.status) for e in ended] == [(napping.run_id, "completed")]
    finally:
        store.close()


@pytest.mark.scenario("S113")
def test_past_the_runs_own_deadline_no_answer_is_offered_or_taken(db_path: Path) -> None:
    """The second tryout: once a run's own deadline passed, `show` still
    printed `answer with: ...` for its question, and that answer, run as
    printed, was stored (the question `completed`, its value in the state)
    before the run timed out. No command is offered for its waits, and an
    answer is refused with nothing answered: the run times out."""
    from tests.timer_flows import LIMITED_ASKER_ENV

    env = {"FLOWDESK_FLOWS": LIMITED_ASKER_ENV}
    started = flowdesk(
        db_path, "start", "limited_asker", "--input", json.dumps({"order": "o"}), env=env
    )
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    assert "answer with: " in flowdesk(db_path, "show", run_id, env=env).stdout  # before it
    time.sleep(LIMIT_S + 0.5)

    shown = flowdesk(db_path, "show", run_id, env=env).stdout
    assert "answer with: " not in shown, shown
    assert "    nothing moves it on any more: the run's own deadline passed (above)" in shown
    [wait] = json.loads(flowdesk(db_path, "show", run_id, "-o", "json", env=env).stdout)["waits"]
    assert wait["command"] is None
    listed = flowdesk(db_path, "waiting", env=env).stdout
    assert "the run's own deadline passed" in listed and "answer with" not in listed

    late = flowdesk(db_path, "answer", run_id, "yes", env=env)
    assert late.returncode == 1, late.stderr
    assert f"run {run_id}: its own deadline passed before the answer came" in late.stderr
    assert "the run is now timed_out; nothing was answered" in late.stderr
    store = open_store(db_path)
    try:
        latest = store.latest(run_id)
        assert store.get_run(run_id).status == "timed_out"
        assert latest.state["approved"] is None and latest.steps["approve"].status != "completed"
    finally:
        store.close()
