"""Encoding and decoding a flow's state (flow/state.py): the outcomes the
engine tests reach only in their first case.

Each test states what a user of the engine sees: which field a decode error
names, which field a step that returned unstorable data is blamed for, what
a step's returned updates do to the state, and when a step that changed its
state in place is caught.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError, model_serializer

from desktop_app.errors import CheckpointDecodeError, StateNotStorableError
from desktop_app.flow.state import (
    StateMutatedError,
    StateTracker,
    apply_output,
    dump_state,
    encode_fields,
    load_state,
)


class Item(BaseModel):
    label: str
    weight: Decimal


class State(BaseModel):
    count: int = 0
    items: list[Item] = []
    tags: list[str] = []
    table: dict[str, int] = {}
    blob: Any = None
    note: str = ""
    payload: Any = None


def test_decode_error_names_the_first_unknown_field_run_and_revision():
    data = {**dump_state(State()), "zeta_old": 1, "alpha_old": 2}
    with pytest.raises(CheckpointDecodeError) as err:
        load_state(State, data, "run-7", 3)
    assert (err.value.run_id, err.value.revision, err.value.field_path) == ("run-7", 3, "alpha_old")
    assert "State" in err.value.reason and "renamed or removed" in err.value.reason


def test_decode_error_names_the_first_missing_field_and_refuses_a_default():
    data = dump_state(State())
    del data["tags"], data["count"]
    with pytest.raises(CheckpointDecodeError) as err:
        load_state(State, data, "run-7", 4)
    assert (err.value.run_id, err.value.revision, err.value.field_path) == ("run-7", 4, "count")
    assert "refusing to fill in a default" in err.value.reason


def test_decode_error_gives_the_dotted_path_of_a_nested_bad_value():
    data = dump_state(State(items=[Item(label="a", weight=Decimal("1"))]))
    data["items"] = [{"label": "a", "weight": "1"}, {"label": "b", "weight": "heavy"}]
    with pytest.raises(CheckpointDecodeError) as err:
        load_state(State, data, "run-7", 5)
    assert (err.value.run_id, err.value.revision, err.value.field_path) == (
        "run-7",
        5,
        "items.1.weight",
    )
    assert err.value.reason == "Input should be a valid decimal"  # pydantic's message


def test_decode_round_trips_nested_values_exactly():
    state = State(count=2, items=[Item(label="a", weight=Decimal("1.50"))], table={"x": 1})
    back = load_state(State, dump_state(state), "r", 0)
    assert back == state and back.items[0].weight == Decimal("1.50")


def test_unstorable_value_blames_its_own_field_and_the_step():
    state = State(note="fine", blob=threading.Lock())
    with pytest.raises(StateNotStorableError) as err:
        encode_fields(state, {"note", "blob", "count"}, "fetch")
    assert (err.value.step_id, err.value.field) == ("fetch", "blob")
    assert "Unable to serialize unknown type" in str(err.value)


def test_too_deep_value_blames_its_field_with_the_serializer_reason():
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    state = State(blob=deep)
    with pytest.raises(StateNotStorableError) as err:
        encode_fields(state, {"blob", "note"}, "walk")
    assert err.value.field == "blob"
    assert "cannot be stored: Maximum serialization depth exceeded." in str(err.value)


def test_the_unstorable_field_is_found_among_storable_ones_before_it():
    # "count" and "note" sort before "payload": each field is checked alone
    state = State(count=1, note="fine", payload=threading.Lock())
    with pytest.raises(StateNotStorableError) as err:
        encode_fields(state, {"count", "note", "payload"}, "fetch")
    assert err.value.field == "payload"


def test_storable_fields_encode_to_json_of_only_those_fields():
    state = State(count=3, tags=["a"], note="n")
    assert encode_fields(state, {"count", "tags"}, "s") == {"count": 3, "tags": ["a"]}


def test_returned_updates_change_only_the_named_fields():
    state = State(count=1, tags=["a"], table={"k": 1})
    new = apply_output(State, state, {"count": 2})
    assert new.count == 2 and state.count == 1  # the given state is left as it was
    assert new.tags is state.tags and new.table is state.table  # the others keep their objects


def test_returned_updates_are_validated_against_the_model():
    state = State()
    with pytest.raises(ValidationError):
        apply_output(State, state, {"count": "many"})
    assert apply_output(State, state, {"count": "5"}).count == 5  # coerced as the model says


def test_unknown_update_fields_and_other_return_types_are_refused():
    state = State()
    with pytest.raises(TypeError, match=r"unknown state field\(s\) \['cuont'\] for State"):
        apply_output(State, state, {"count": 1, "cuont": 2})
    with pytest.raises(TypeError, match="not list"):
        apply_output(State, state, [("count", 1)])


def test_none_keeps_the_state_and_a_whole_state_replaces_it():
    state = State(count=1)
    assert apply_output(State, state, None) is state
    other = State(count=9)
    assert apply_output(State, state, other) is other


def test_tracker_encodes_each_new_state_fully_and_correctly():
    state = State(count=1, tags=["a"])
    tracker = StateTracker(state)
    assert tracker.encode(state) == dump_state(state)
    step1 = apply_output(State, state, {"tags": ["a", "b"]})
    assert tracker.encode(step1, "s1") == dump_state(step1)
    step2 = apply_output(State, step1, {"count": 5, "note": "x"})
    assert tracker.encode(step2, "s2") == dump_state(step2)
    # the dump of an earlier state is not changed by later encodes
    first = dump_state(state)
    again = StateTracker(state)
    snapshot = again.encode(state)
    again.encode(step2, "s2")
    assert snapshot == first


def test_tracker_refuses_an_unstorable_change_and_keeps_its_last_good_dump():
    state = State(count=1)
    tracker = StateTracker(state)
    bad = apply_output(State, state, {"blob": threading.Lock()})
    with pytest.raises(StateNotStorableError) as err:
        tracker.encode(bad, "lock-step")
    assert (err.value.step_id, err.value.field) == ("lock-step", "blob")
    assert tracker.encode(state) == dump_state(state)


@pytest.mark.parametrize(
    ("field", "grow"),
    [
        ("tags", lambda s: s.tags.append("b")),
        ("table", lambda s: s.table.update(z=1)),
        ("items", lambda s: s.items.pop()),
    ],
    ids=["list", "dict", "shrunk"],
)
def test_a_container_changed_in_place_is_caught(field, grow):
    state = State(tags=["a"], table={"k": 1}, items=[Item(label="a", weight=Decimal(1))])
    tracker = StateTracker(state)
    grow(state)
    with pytest.raises(StateMutatedError, match=f"step 'bad' changed state field '{field}'"):
        tracker.check_unmutated(state, "bad")


def test_a_replaced_container_or_a_field_no_longer_a_container_is_not_a_mutation():
    state = State(tags=["a"], blob=[1, 2])
    tracker = StateTracker(state)
    # returned as new values: never a mutation, whatever their size
    new = apply_output(State, state, {"tags": ["a", "b", "c"], "blob": 3})
    tracker.check_unmutated(new, "ok")
    tracker.encode(new, "ok")
    tracker.check_unmutated(new, "ok")
    # blob is no longer a container; a later in-place change of tags is still caught
    new.tags.append("d")
    with pytest.raises(StateMutatedError, match="'tags'"):
        tracker.check_unmutated(new, "late")


class Range(BaseModel):
    """Each field stores alone; the pair is refused by the model's own serializer."""

    lo: int = 0
    hi: int = 1

    @model_serializer(mode="wrap")
    def _check(self, handler):
        out = handler(self)
        if "lo" in out and "hi" in out and out["lo"] > out["hi"]:
            raise ValueError("lo above hi")
        return out


def test_fields_storable_alone_but_not_together_are_all_named():
    with pytest.raises(StateNotStorableError) as err:
        encode_fields(Range(lo=5, hi=1), {"lo", "hi"}, "widen")
    assert (err.value.step_id, err.value.field) == ("widen", "hi,lo")
    assert "field 'hi,lo' that cannot be stored: it is not JSON data. Return JSON data" in str(
        err.value
    )


def test_an_unknown_input_field_message_lists_every_unknown_key_and_says_none_for_no_fields():
    from desktop_app.errors import InputError
    from desktop_app.flow.state import refuse_unknown_fields

    class Empty(BaseModel):
        pass

    with pytest.raises(InputError) as err:
        refuse_unknown_fields(State, {"cuont": 1, "tgas": []})
    assert str(err.value) == (
        "State has no field 'cuont', 'tgas' (did you mean 'count'?); its fields: count, items, "
        "tags, table, blob, note, payload. Nothing was created."
    )
    with pytest.raises(InputError) as err:
        refuse_unknown_fields(Empty, {"x": 1})
    assert str(err.value) == "Empty has no field 'x'; its fields: none. Nothing was created."


def test_by_default_a_same_size_change_in_place_is_not_caught_strict_names_it_and_its_step():
    """``Engine(check_state=True)`` (a strict tracker) catches a list item
    changed in place, and names the step that made a field unstorable in
    place; the default tracker catches only a size change (S110)."""
    state = State(tags=["a"], table={"k": 1})
    default, strict = StateTracker(state), StateTracker(state, strict=True)
    state.tags[0] = "b"
    default.check_unmutated(state, "edit")  # the documented default: not caught
    with pytest.raises(StateMutatedError) as err:
        strict.check_unmutated(state, "edit")
    assert str(err.value) == (
        "step 'edit' changed state field 'tags' in place (its size, if any, stayed the same): "
        "such a change is not stored, so the steps after it would see it only until the run "
        "is resumed; return the new value instead (for example {'tags': new_value})"
    )
    other = State(table={"k": 1})
    tracker = StateTracker(other, strict=True)
    other.table["k"] = object()  # type: ignore[assignment]  # same size, now unstorable
    with pytest.raises(StateNotStorableError) as unstorable:
        tracker.check_unmutated(other, "edit")
    assert (unstorable.value.step_id, unstorable.value.field) == ("edit", "table")


def test_a_container_changed_in_place_and_returned_is_encoded_again_and_stored():
    """A step that appends to an ``Any`` field in place and returns it:
    pydantic keeps the value as given (the same object the tracker saw), so
    only the returned key says it changed; it is encoded again and marked
    to be stored."""
    state = State(blob=["a"])
    tracker = StateTracker(state)
    tracker.stored(frozenset(tracker.dirty))
    state.blob.append("b")
    tracker.check_unmutated(state, "grow", {"blob"})  # returned: not a mutation
    new = apply_output(State, state, {"blob": state.blob})
    assert new.blob is state.blob  # as given
    dumped = tracker.encode(new, "grow", {"blob"})
    assert dumped["blob"] == ["a", "b"] and tracker.dirty == {"blob"}


def test_a_stored_snapshots_steps_count_each_id_once_and_a_driver_resuming_from_it_reads_them():
    """A checkpoint's step map (``LayeredSteps``: the levels a run's driver
    handed over) counts each step id once, the newest record winning; the
    working map a driver resumes from it with (``StepRecords``) reads,
    counts and lists the same records, and writes go on top."""
    from desktop_app.flow.state import LayeredSteps, StepRecords
    from desktop_app.store.records import StepRecord

    old, new, other = (
        StepRecord("a", "failed", attempts=1),
        StepRecord("a", "completed", attempts=2),
        StepRecord("b", "completed"),
    )
    stored = LayeredSteps({"a": old}, {"a": new, "b": other})
    assert len(stored) == 2 and list(stored) == ["a", "b"] and stored["a"] is new
    working = StepRecords(stored)
    assert len(working) == 2 and working["a"] is new and "b" in working
    working["c"] = StepRecord("c", "in_progress")
    assert sorted(working) == ["a", "b", "c"] and working.dirty == {"c"}
