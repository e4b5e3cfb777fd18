"""A new user's report: ``Engine.fork(checkpoint, {"itemz": 1})`` raised a
bare ``TypeError: step returned unknown state field(s)`` (no step ran; the
docstring promised a pydantic ValidationError). It raises ``InputError``
naming the fields the state has, and nothing is created. Real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from desktop_app.errors import InputError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    items: list[str] = []
    n: int = 0


FLOW = FlowBuilder("f", S).step("a", lambda s: {"n": s.n + 1}).compile()


@pytest.mark.parametrize(
    "changes", [{"itemz": ["x"]}, lambda s: 42], ids=["unknown field", "not a dict"]
)
def test_a_fork_whose_changes_do_not_fit_raises_input_error_and_creates_nothing(
    db_path: Path, changes: object
) -> None:
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[FLOW])
        done = engine.run("f", S())
        before = len(store.list_runs())
        with pytest.raises(InputError) as err:
            engine.fork(f"{done.run_id}:0", changes)  # type: ignore[arg-type]
        assert str(err.value) in (  # the unknown field, or not a dict
            "S has no field 'itemz' (did you mean 'items'?); its fields: items, n. "
            "Nothing was created.",
            f"fork {done.run_id}:0: the changes must be a dict of field updates or a S, not "
            "int (its fields: items, n); nothing was run",
        )
        assert "step returned" not in str(err.value)
        assert len(store.list_runs()) == before
        with pytest.raises(ValidationError):  # a known field, a value that does not fit
            engine.fork(f"{done.run_id}:0", {"n": "many"})
    finally:
        store.close()


def test_a_run_whose_input_names_no_state_field_is_refused_before_it_is_created(
    db_path: Path,
) -> None:
    """A new user's report: ``Engine.run(flow, {"itemz": [...]})`` started
    the run with ``items`` at its default (pydantic drops an unknown key
    without a word). It raises InputError naming the nearest field, and
    creates nothing."""
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[FLOW])
        with pytest.raises(InputError) as err:
            engine.run("f", {"itemz": ["x"]})
        assert str(err.value) == (
            "S has no field 'itemz' (did you mean 'items'?); its fields: items, n. "
            "Nothing was created."
        )
        assert store.list_runs() == []
        assert engine.run("f", {"items": ["x"]}).state.items == ["x"]
    finally:
        store.close()


class Address(BaseModel):
    street: str = ""
    zip_code: str = ""


class Tags(BaseModel, extra="allow"):
    main: str = ""


class Customer(BaseModel):
    name: str = ""
    address: Address = Address()
    previous: list[Address] = []
    billing: Address | None = None
    by_kind: dict[str, Address] = {}
    tags: Tags = Tags()


CUSTOMER = FlowBuilder("customer", Customer).step("a", lambda s: {}).compile()


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"address": {"zip_cod": "1"}}, "at 'address', has no field 'zip_cod'"),
        ({"previous": [{}, {"stret": "x"}]}, "at 'previous[1]', has no field 'stret'"),
        ({"billing": {"zipcode": "1"}}, "at 'billing', has no field 'zipcode'"),
        ({"by_kind": {"home": {"town": "x"}}}, "at \"by_kind['home']\", has no field 'town'"),
    ],
    ids=["model", "list of models", "optional model", "dict of models"],
)
def test_an_unknown_field_inside_a_nested_model_is_refused_too(
    db_path: Path, changes: dict, said: str
) -> None:
    """The last tryout's report: a fork (or a start) whose changes misspell
    a field of a nested model (``{"address": {"zip_cod": ...}}``) ran with
    the old value: pydantic drops the key of a nested model too. It is
    refused with its path, for a fork and for a new run, and nothing is
    created; a nested model that keeps extra keys (``extra="allow"``)
    stores them, so they pass."""
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[CUSTOMER])
        done = engine.run("customer", Customer())
        for attempt in (
            lambda: engine.fork(f"{done.run_id}:0", changes),
            lambda: engine.run("customer", changes),
        ):
            with pytest.raises(InputError) as err:
                attempt()
            assert str(err.value).startswith(f"Address, {said}"), err.value
            assert str(err.value).endswith("; its fields: street, zip_code. Nothing was created.")
            if "zip_cod" in said:
                assert "has no field 'zip_cod' (did you mean 'zip_code'?)" in str(err.value)
        assert len(store.list_runs()) == 1
        forked = engine.fork(f"{done.run_id}:0", {"tags": {"main": "a", "extra": "kept"}})
        assert forked.state.tags.model_dump() == {"main": "a", "extra": "kept"}
        fine = engine.run("customer", {"previous": [{"street": "x"}], "billing": None})
        assert fine.state.previous == [Address(street="x")]
    finally:
        store.close()
