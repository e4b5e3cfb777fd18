"""flow/state.py's ``copy_model``: the copy a step's output is validated
into (``apply_output``) is pydantic's own shallow copy, slot for slot, and
never shares a container the state it came from holds; a model that copies
itself its own way, or holds private values, is copied by its ``__copy__``.
And ``StepRecords``' membership test (asked at every step's completion)
answers for every level of the map."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from desktop_app.flow.state import LayeredSteps, StepRecords, apply_output, copy_model
from desktop_app.store.protocol import StepRecord


class Plain(BaseModel):
    n: int = 0
    items: list[str] = []


class Extra(BaseModel):
    model_config = ConfigDict(extra="allow")
    n: int = 0


class Private(BaseModel):
    n: int = 0
    _cache: dict[str, int] = PrivateAttr(default_factory=dict)


class OwnCopy(BaseModel):
    n: int = 0
    copies: int = 0

    def __copy__(self) -> OwnCopy:
        return OwnCopy(n=self.n, copies=self.copies + 1)


def slots(model: BaseModel) -> dict[str, Any]:
    return {name: getattr(model, name) for name in BaseModel.__slots__}


def test_the_slots_copy_model_sets_are_every_slot_pydantic_gives_a_model():
    # a pydantic that adds a slot to BaseModel would leave it unset in the
    # copy: this fails first, so copy_model is revisited
    assert set(BaseModel.__slots__) == {
        "__dict__",
        "__pydantic_fields_set__",
        "__pydantic_extra__",
        "__pydantic_private__",
    }


def test_a_plain_model_is_copied_as_pydantic_copies_it_sharing_no_container():
    state = Plain(n=3, items=["a"])
    ours, theirs = copy_model(state), state.__copy__()
    assert type(ours) is Plain and ours == theirs == state
    assert slots(ours) == slots(theirs)
    assert ours.__dict__ is not state.__dict__
    assert ours.__pydantic_fields_set__ is not state.__pydantic_fields_set__
    assert ours.__pydantic_extra__ is None and ours.__pydantic_private__ is None
    ours.__dict__["n"] = 99
    ours.__pydantic_fields_set__.discard("n")
    assert state.n == 3 and state.__pydantic_fields_set__ == {"n", "items"}
    assert ours.items is state.items  # shallow: field values are shared, as pydantic's


def test_extra_fields_are_copied_not_shared():
    state = Extra(n=1, colour="red")
    ours = copy_model(state)
    assert slots(ours) == slots(state.__copy__())
    assert ours.__pydantic_extra__ == {"colour": "red"}
    assert ours.__pydantic_extra__ is not state.__pydantic_extra__
    ours.__pydantic_extra__["colour"] = "blue"
    assert state.colour == "red"


def test_private_values_and_an_own_copy_go_through_the_models_copy():
    state = Private(n=2)
    state._cache["k"] = 1
    ours = copy_model(state)
    assert ours._cache == {"k": 1} and ours.__pydantic_private__ is not state.__pydantic_private__
    assert ours.__dict__ is not state.__dict__
    own = copy_model(OwnCopy(n=4))
    assert (own.n, own.copies) == (4, 1)


def test_a_steps_output_never_changes_the_state_it_was_given():
    state = Extra(n=1, colour="red")
    new = apply_output(Extra, state, {"n": 2})
    assert (new.n, state.n) == (2, 1)
    assert new.__pydantic_fields_set__ >= {"n"} and new.colour == "red"
    assert new.__pydantic_extra__ is not state.__pydantic_extra__


def test_step_records_membership_reads_the_top_and_every_level():
    records = StepRecords({"a": StepRecord("a", "completed")})
    assert "a" in records and "b" not in records
    records["b"] = StepRecord("b", "in_progress")
    assert "b" in records and "c" not in records
    for i in range(StepRecords.flatten_every + 1):  # a full top becomes a level
        records[f"s{i}"] = StepRecord(f"s{i}", "completed")
    records.snapshot()
    records["late"] = StepRecord("late", "in_progress")
    assert all(k in records for k in ("a", "b", "s0", f"s{StepRecords.flatten_every}", "late"))
    assert "nope" not in records and 3 not in records


def test_an_instance_whose_private_slot_was_never_set_copies_as_pydantic_copies_it():
    # pydantic's __copy__ asks hasattr(): an instance made without __init__
    # may lack the slot; the copy then holds no private values either
    bare = Plain.__new__(Plain)
    object.__setattr__(bare, "__dict__", {"n": 7, "items": []})
    object.__setattr__(bare, "__pydantic_fields_set__", {"n"})
    object.__setattr__(bare, "__pydantic_extra__", None)
    ours = copy_model(bare)
    assert slots(ours) == slots(bare.__copy__())
    assert ours.n == 7 and ours.__pydantic_private__ is None


def test_output_into_a_model_no_step_has_used_yet_is_validated_and_checked():
    # a model class seen for the first time: its field names are read then
    class Fresh(BaseModel):
        n: int = 0
        label: str = ""

    new = apply_output(Fresh, Fresh(), {"n": "3"})
    assert (new.n, new.label) == (3, "")

    class Fresher(BaseModel):
        n: int = 0

    try:
        apply_output(Fresher, Fresher(), {"m": 1})
    except TypeError as exc:
        assert "unknown state field(s) ['m'] for Fresher" in str(exc)
    else:
        raise AssertionError("an unknown field was taken")


def test_layered_steps_membership_reads_every_level():
    layered = LayeredSteps({"a": StepRecord("a", "completed")}, {"b": StepRecord("b", "completed")})
    assert "a" in layered and "b" in layered
    assert "c" not in layered and "c" not in LayeredSteps()
