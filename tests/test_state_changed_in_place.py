"""A new user's report: a step that changed a list item in place (same
size), and returned nothing, gave a different result depending on whether
the run paused there: the next step saw the change in this process, but it
was never stored, so after a pause (or a crash) the run went on without it.
By default Flowdesk catches only a change of size (encoding every field at
every step would cost the whole state); ``Engine(check_state=True)``, meant
for a flow's tests, catches every change in place and fails the step, and
the README says which is which. Real SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.store import open_store


class Sub(BaseModel):
    n: int = 0


class S(BaseModel):
    items: list[str] = ["a"]
    sub: Sub = Sub()
    seen: str = ""
    seen_n: int = 0


def _flow(change: Any, pause: bool) -> Any:
    def read(s: S) -> dict[str, Any]:
        return {"seen": s.items[0], "seen_n": s.sub.n}

    b = FlowBuilder("inplace", S).step("change", change)
    if pause:
        b = b.await_input("ok", "seen", prompt="go on?")
    b = b.step("read", read)
    return b.chain().compile()


def _same_size(s: S) -> None:
    s.items[0] = "CHANGED"


def _nested(s: S) -> None:
    s.sub.n = 5


@pytest.mark.scenario("S110")
@pytest.mark.parametrize("change", [_same_size, _nested], ids=["list item", "nested model"])
def test_check_state_fails_a_step_that_changes_the_state_in_place(
    db_path: Path, change: Any
) -> None:
    store = open_store(db_path)
    try:
        done = Engine(store, flows=[_flow(change, False)], check_state=True).run("inplace", S())
        assert done.status == "failed"
        assert "changed state field" in (done.error or "") and "in place" in (done.error or "")
        assert "return the new value instead" in (done.error or "")
        # nothing of it was stored, and the next step never ran
        stored = store.latest(done.run_id)
        assert stored.state["items"] == ["a"] and stored.state["sub"] == {"n": 0}
        assert stored.state["seen"] == ""
    finally:
        store.close()


@pytest.mark.scenario("S110")
def test_by_default_a_same_size_change_in_place_is_not_stored(db_path: Path) -> None:
    """What the README says of the default: the change is seen by the steps
    after it in this process and not stored, so a pause loses it."""
    store = open_store(db_path)
    try:
        straight = Engine(store, flows=[_flow(_same_size, False)]).run("inplace", S())
        assert straight.status == "completed" and straight.state.seen == "CHANGED"
        assert store.latest(straight.run_id).state["items"] == ["a"]  # never stored

        engine = Engine(store, flows=[_flow(_same_size, True)])
        paused = engine.run("inplace", S())
        assert paused.status == "waiting"
        assert engine.resume_with(paused.run_id, "yes").state.seen == "a"
    finally:
        store.close()


def test_check_state_lets_returned_changes_and_assigned_fields_through(db_path: Path) -> None:
    """A step that returns its changes, or assigns a field (stored as a
    change, as without the check), passes the check."""

    def returned(s: S) -> dict[str, Any]:
        return {"items": ["b", *s.items], "sub": Sub(n=2)}

    def assigned(s: S) -> None:
        s.seen = "set"

    flow = (
        FlowBuilder("fine", S)
        .step("returned", returned)
        .step("assigned", assigned)
        .chain()
        .compile()
    )
    store = open_store(db_path)
    try:
        done = Engine(store, flows=[flow], check_state=True).run("fine", S())
        assert done.status == "completed", done.error
        stored = store.latest(done.run_id).state
        assert (stored["items"], stored["sub"], stored["seen"]) == (["b", "a"], {"n": 2}, "set")
    finally:
        store.close()


class Loose(BaseModel):
    items: list[int] = [1, 2]
    blob: Any = None


@pytest.mark.parametrize("check", [False, True], ids=["default", "check_state"])
def test_a_field_changed_in_place_and_returned_is_stored(db_path: Path, check: bool) -> None:
    """The third tryout's report: `s.items[1] = 77; return {"items":
    s.items}` was stored by default and failed under check_state, and an
    `append` then the same return failed in both. The step returned the
    field: it is stored in both, also for a field typed `Any` (whose value
    validation keeps as the same object)."""

    def change(s: Loose) -> dict[str, Any]:
        s.items[1] = 77
        s.items.append(3)
        s.blob["k"].append("y")
        return {"items": s.items, "blob": s.blob}

    flow = FlowBuilder("loose", Loose).step("change", change).compile()
    store = open_store(db_path)
    try:
        done = Engine(store, flows=[flow], check_state=check).run("loose", Loose(blob={"k": ["x"]}))
        assert done.status == "completed", done.error
        stored = store.latest(done.run_id).state
        assert (stored["items"], stored["blob"]) == ([1, 77, 3], {"k": ["x", "y"]})
    finally:
        store.close()


def test_check_state_also_catches_a_change_in_place_in_a_retried_attempt(db_path: Path) -> None:
    """Each retry starts from the stored state with a tracker of its own;
    under ``check_state`` that one is as strict as the first: an attempt
    that raised, then one that changed a list item in place, fails the step
    with nothing stored."""
    attempts: list[int] = []

    def flaky(s: S) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("a first attempt that fails")
        s.items[0] = "CHANGED"

    flow = FlowBuilder("inplace", S, retry=1).step("change", flaky).chain().compile()
    store = open_store(db_path)
    try:
        done = Engine(store, flows=[flow], check_state=True).run("inplace", S())
        assert len(attempts) == 2
        assert done.status == "failed" and "in place" in (done.error or ""), done.error
        assert store.latest(done.run_id).state["items"] == ["a"]
    finally:
        store.close()
