"""A run's stored state moved onto a newer state model of its flow
(``state.upgraded_state``, what ``resume --onto-current`` and the app's
"fork onto current" do): added fields take their defaults, removed ones are
left out, a field with no default or a value that no longer fits is refused
with what works there. In process: the CLI's tests of the same behaviour
run in subprocesses."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from desktop_app.errors import CheckpointDecodeError
from desktop_app.flow.state import upgraded_state

STORED = {"n": 3, "notes": ["a"], "old": "x", "older": 1}


class Grown(BaseModel):
    n: int = 0
    notes: list[str] = []
    tags: list[str] = Field(default_factory=lambda: ["new"])
    owner: str = "nobody"


def test_added_fields_take_their_defaults_and_removed_ones_are_left_out() -> None:
    state, defaults, dropped = upgraded_state(Grown, STORED, "r1", 4)
    assert state == Grown(n=3, notes=["a"], tags=["new"], owner="nobody")
    assert defaults == {"owner": "nobody", "tags": ["new"]}
    assert list(defaults) == ["owner", "tags"]  # sorted, as said on stderr
    assert dropped == ["old", "older"]
    unchanged, none, kept = upgraded_state(Grown, {**STORED, "owner": "me", "tags": []}, "r1", 4)
    assert (unchanged.owner, unchanged.tags, none) == ("me", [], {})
    assert kept == ["old", "older"]


class Required(BaseModel):
    n: int = 0
    notes: list[str] = []
    zeta: str
    alpha: int


def test_an_added_field_without_a_default_is_refused_naming_the_first() -> None:
    with pytest.raises(CheckpointDecodeError) as refused:
        upgraded_state(Required, STORED, "r1", 4)
    err = refused.value
    assert (err.run_id, err.revision, err.field_path) == ("r1", 4, "alpha")
    assert err.reason == "Required has a field the run's state lacks and gives it no default"
    assert str(err) == (
        "checkpoint of run r1 revision 4 cannot be decoded at field 'alpha': Required has a "
        "field the run's state lacks and gives it no default. Nothing ran from it: the state "
        "stored there no longer fits the flow's state model; give the field a default in the "
        "model to move the run onto it, or keep the run for its flow's earlier code."
    )


class Retyped(BaseModel):
    n: list[str] = []
    notes: list[str] = []


def test_a_stored_value_that_no_longer_fits_names_what_works_on_the_new_version() -> None:
    with pytest.raises(CheckpointDecodeError) as refused:
        upgraded_state(Retyped, STORED, "r1", 4)
    err = refused.value
    assert (err.run_id, err.revision, err.field_path) == ("r1", 4, "n")
    assert isinstance(err.__cause__, CheckpointDecodeError) and err.reason == err.__cause__.reason
    assert str(err) == (
        f"checkpoint of run r1 revision 4 cannot be decoded at field 'n': {err.reason}. "
        "Nothing ran from it: the state stored there no longer fits the flow's state model; "
        "change the field in the current model to a type its stored value fits (or give it a "
        "validator that converts it), or keep the run for its flow's earlier code."
    )
    assert "fork" not in str(err) and "earlier checkpoint" not in str(err)
