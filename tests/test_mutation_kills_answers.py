"""What a person sees when answering (flow/answers.py): an interrupt's
``choices`` (the only answers taken, each question its own), the message of a
refused answer, and the answer that lost a race with another process's.

Each test runs a real engine over a real SQLite file (``db_path``)."""

from __future__ import annotations

import operator
import threading
import time
from collections import Counter

import pytest
from pydantic import BaseModel

from desktop_app.errors import InputError, RevisionConflictError, WaitAlreadyResolvedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests.hook_clock import racing_engines


class S(BaseModel):
    notes: list[str] = []
    n: int = 0


def two_questions(calls: Counter[str]):
    """Two parallel branches, each asking its own question with its own choices."""

    def branch(name: str, choices: tuple[str, ...]):
        def fn(s: S, ctx) -> dict:
            calls[name] += 1
            got = ctx.interrupt(f"{name}?", choices=choices)
            return {"notes": [f"{name}:{got}"]}

        return fn

    return (
        FlowBuilder("choose", S)
        .parallel(
            "ask",
            {"ship": branch("ship", ("yes", "no")), "size": branch("size", ("small", "large"))},
            reducers={"notes": operator.add},
        )
        .step("after", lambda s: {"n": len(s.notes)})
        .chain()
        .compile()
    )


def wait_ids(engine: Engine, run_id: str) -> dict[str, str]:
    """branch name -> its pending wait id"""
    return {w.wait_id.split("/")[1].split(":")[0]: w.wait_id for w in engine.waits(run_id)}


def test_each_question_takes_only_its_own_choices_trimmed_and_lower_cased(db_path):
    calls: Counter[str] = Counter()
    engine = Engine(open_store(db_path), flows=[two_questions(calls)], clock=ManualClock())
    rid = engine.run("choose", S()).run_id
    waits = wait_ids(engine, rid)
    assert set(waits) == {"ship", "size"}
    before = engine.store.latest(rid)
    # the other question's word, a typo and a non-text answer: each refused,
    # with the question's own choices named, and nothing changes
    for value, shown in (("small", "'small'"), ("maybe", "'maybe'"), (1, "1")):
        with pytest.raises(InputError) as refused:
            engine.resume_with(rid, value, wait_id=waits["ship"])
        assert str(refused.value) == (
            f"run {rid}: {shown} is not an answer to this question; "
            "answer yes or no (the run is still waiting)"
        )
    with pytest.raises(InputError) as refused:
        engine.resume_with(rid, "yes", wait_id=waits["size"])
    assert str(refused.value) == (
        f"run {rid}: 'yes' is not an answer to this question; "
        "answer small or large (the run is still waiting)"
    )
    after = engine.store.latest(rid)
    assert after.revision == before.revision and after.waits == before.waits
    assert engine.status(rid).status == "waiting"
    # a chosen word, as typed: the step gets it trimmed and lower-cased
    engine.resume_with(rid, "  YES ", wait_id=waits["ship"])
    done = engine.resume_with(rid, "Large", wait_id=waits["size"])
    assert done.status == "completed"
    assert sorted(done.state.notes) == ["ship:yes", "size:large"]
    assert calls == {"ship": 2, "size": 2}
    engine.store.close()


def approval():
    def approve(s: S, ctx) -> dict:
        return {"notes": [f"approved:{ctx.interrupt('ship it?', choices=('yes', 'no'))}"]}

    return FlowBuilder("approve", S).step("approve", approve).chain().compile()


def test_an_answer_that_loses_the_race_says_the_first_answer_stands(db_path):
    """Two engines over one file (the app and the CLI): the second read the
    waiting run before the first saved its answer; its own save conflicts and
    it is told the question was answered a moment ago, not to reload."""
    with racing_engines(db_path, approval) as (first, second, clock):
        rid = first.run("approve", S()).run_id
        (wait,) = first.waits(rid)
        won: list[str] = []
        clock.arm(lambda: won.append(first.resume_with(rid, "no").status))
        with pytest.raises(WaitAlreadyResolvedError) as lost:
            second.resume_with(rid, "yes")
        assert won == ["completed"]
        assert str(lost.value) == (
            f"run {rid}: wait {wait.wait_id} was answered a moment ago by another "
            "process; the first answer stands and nothing ran here"
        )
        assert first.store.latest(rid).state["notes"] == ["approved:no"]


def test_an_answer_that_loses_to_another_question_s_answer_is_not_told_it_was_answered(db_path):
    """The other process answered the *other* question first: this answer's
    save conflicts, it is told so (not that its question was answered), and
    given again it is taken."""
    calls: Counter[str] = Counter()
    with racing_engines(db_path, lambda: two_questions(calls)) as (first, second, clock):
        rid = first.run("choose", S()).run_id
        waits = wait_ids(first, rid)
        clock.arm(lambda: first.resume_with(rid, "small", wait_id=waits["size"]))
        with pytest.raises(RevisionConflictError):
            second.resume_with(rid, "yes", wait_id=waits["ship"])
        assert [w.wait_id for w in second.waits(rid)] == [waits["ship"]]
        done = second.resume_with(rid, "yes", wait_id=waits["ship"])
        assert done.status == "completed"
        assert sorted(done.state.notes) == ["ship:yes", "size:small"]


def test_questions_asked_at_once_are_listed_in_the_branches_declared_order(db_path):
    """Branches ``a``, ``b``, ``c`` ask in the reverse order (``c`` first):
    their questions are listed (the run's waits, which ``answer``, ``waiting``
    and the inbox show) as declared, as the branches' updates are merged,
    not in the order they happened to ask (a CI run listed ``wrap?`` before
    ``gift?`` once); and so again once one of them is answered."""
    asked = {name: threading.Event() for name in "abc"}
    after = {"a": "b", "b": "c", "c": None}

    def branch(name: str):
        def fn(s: S, ctx) -> dict:
            before = after[name]
            if before is not None:  # ask only once the branch declared after it asked
                asked[before].wait(10)
                time.sleep(0.05)
            try:
                got = ctx.interrupt(f"{name}?")
            finally:
                asked[name].set()
            return {"notes": [f"{name}:{got}"]}

        return fn

    flow = (
        FlowBuilder("three", S)
        .parallel("ask", {n: branch(n) for n in "abc"}, reducers={"notes": operator.add})
        .step("after", lambda s: {"n": len(s.notes)})
        .chain()
        .compile()
    )
    engine = Engine(open_store(db_path), flows=[flow], clock=ManualClock())
    rid = engine.run("three", S()).run_id
    assert [w.prompt for w in engine.waits(rid)] == ["a?", "b?", "c?"]
    assert [w.prompt for w in engine.store.latest(rid).waits] == ["a?", "b?", "c?"]
    (b_wait,) = [w.wait_id for w in engine.waits(rid) if w.prompt == "b?"]
    engine.resume_with(rid, "yes", wait_id=b_wait)
    assert [w.prompt for w in engine.waits(rid)] == ["a?", "c?"]


def test_an_answer_to_a_question_another_process_answered_and_runs_on_says_it_was_answered(
    db_path,
):
    """The first answer's process is still running the run on (its step
    after the question), holding the run's lease, when the second answer to
    the same question comes: it is told the question was answered (the
    first answer stands), not that a live process holds the run and to
    wait for it (a tryout: the app's answer dialog, after the CLI's answer)."""
    going = threading.Event()
    release = threading.Event()

    def flow():
        def ask(s: S, ctx) -> dict:
            return {"notes": [ctx.interrupt("ship it?", choices=("yes", "no"))]}

        def ship(s: S) -> dict:
            going.set()
            release.wait(10)
            return {"n": 1}

        return FlowBuilder("approve", S).step("ask", ask).step("ship", ship).chain().compile()

    with racing_engines(db_path, flow) as (first, second, _clock):
        rid = first.run("approve", S()).run_id
        (wait,) = first.waits(rid)
        done: list[str] = []
        runner = threading.Thread(
            target=lambda: done.append(first.resume_with(rid, "yes", wait_id=wait.wait_id).status)
        )
        runner.start()
        try:
            assert going.wait(10)
            with pytest.raises(WaitAlreadyResolvedError) as lost:
                second.resume_with(rid, "no", wait_id=wait.wait_id)
        finally:
            release.set()
            runner.join(10)
        assert done == ["completed"]
        assert str(lost.value) == (
            f"run {rid}: wait {wait.wait_id} was already answered; the first answer stands"
        )
        assert first.store.latest(rid).state["notes"] == ["yes"]


# -- an answer past the run's own deadline, and one that does not fit ----------


def test_an_answer_at_the_runs_own_deadline_is_refused_naming_both_times_and_times_it_out(
    db_path,
):
    """In process (the CLI test of S113 sees it through a subprocess): an
    answer given at the very instant the run's own deadline falls is late;
    the refusal names that deadline, not the question's (an hour later),
    and the run is timed out with nothing answered."""
    from desktop_app.errors import RunStateError, iso_utc
    from tests.timer_flows import LIMIT_S, Order, limited_asker

    clock = ManualClock()
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[limited_asker], clock=clock)
        run = engine.run("limited_asker", Order(order="o"))
        assert run.status == "waiting"
        deadline = store.get_run(run.run_id).deadline_at
        assert deadline is not None
        clock.advance(deadline - clock.now())  # exactly at it
        with pytest.raises(RunStateError) as err:
            engine.resume_with(run.run_id, "yes")
        at = iso_utc(deadline, "milliseconds")
        assert str(err.value) == (
            f"run {run.run_id}: its own deadline passed before the answer came (its deadline "
            f"{at}, the answer at {at} by the later of this process's clock and the "
            "database's); the run is now timed_out; nothing was answered"
        )
        assert LIMIT_S < 3600  # the question's own deadline is an hour away: not the one named
        assert store.get_run(run.run_id).status == "timed_out"
        assert store.latest(run.run_id).state["approved"] is None
    finally:
        store.close()


def test_an_answer_that_does_not_fit_its_field_says_so_and_the_run_still_waits(db_path):
    from tests.timer_flows import Order, asker

    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[asker], clock=ManualClock())
        run = engine.run("asker", Order(order="o"))
        with pytest.raises(InputError) as err:
            engine.resume_with(run.run_id, {"not": "a string"})
        assert str(err.value) == (
            f"run {run.run_id}: the answer does not fit field 'approved': Input should be a "
            "valid string; nothing was answered, the run still waits"
        )
        assert store.get_run(run.run_id).status == "waiting"
    finally:
        store.close()


def test_an_answer_that_is_not_json_data_says_so_and_the_run_still_waits(db_path):
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[approval()], clock=ManualClock())
        rid = engine.run("approve", S()).run_id
        with pytest.raises(InputError) as err:
            engine.resume_with(rid, {1, 2})  # a set: not JSON data
        said = str(err.value)
        assert said.startswith(f"run {rid}: the answer must be JSON data: ")
        assert said.endswith("; nothing was answered, the run still waits")
        assert store.get_run(rid).status == "waiting"
    finally:
        store.close()


def test_an_answer_that_loses_to_a_cancel_says_nothing_was_answered(db_path):
    """The other process canceled the run between this answer's read and
    its save: the answer is refused naming the cancel, not a conflict."""
    from desktop_app.errors import RunStateError

    with racing_engines(db_path, approval) as (first, second, clock):
        rid = first.run("approve", S()).run_id
        clock.arm(lambda: first.cancel(rid))
        with pytest.raises(RunStateError) as lost:
            second.resume_with(rid, "yes")
        assert str(lost.value) == (
            f"run {rid} was canceled a moment ago by another process; nothing was answered"
        )
        assert first.store.get_run(rid).status == "canceled"
