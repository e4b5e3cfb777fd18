"""Checkpoint delta encoding (store/codec.py): what the round-trip tests missed.

The property tests check that ``apply(old, diff(old, new)) == new``; that
holds even for a delta that stores unchanged fields again or a decoder that
loses the name of the field it could not fold. These tests check the two
promises behind it: an unchanged field costs nothing, and a delta that does
not fit its base is refused with the field named.
"""

from __future__ import annotations

import pytest

from desktop_app.store import codec


def test_equal_but_not_identical_fields_are_not_stored_again():
    # a state read back from the store is a new object per field: equal, not identical
    old = {"items": [1, 2, 3], "meta": {"k": "v"}, "n": 7}
    new = {"items": [1, 2, 3], "meta": {"k": "v"}, "n": 7}
    assert new["items"] is not old["items"] and new["meta"] is not old["meta"]
    assert codec.diff_state(old, new) == {}


def test_a_grown_list_costs_its_new_items_only():
    old = {"items": [1, 2], "name": "a"}
    new = {"items": [1, 2, 3], "name": "a"}
    assert codec.diff_state(old, new) == {"append": {"items": [3]}}
    assert codec.apply_state_delta(old, codec.diff_state(old, new)) == new


@pytest.mark.parametrize(
    ("current", "items"),
    [("ab", ["c"]), (["a"], "b"), ({"a": 1}, ["b"]), ("ab", "c"), (3, [4])],
    ids=["text+list", "list+text", "object+list", "text+text", "number+list"],
)
def test_an_append_onto_a_non_list_names_the_field(current, items):
    base = {"names": current}
    with pytest.raises(TypeError, match="append delta on non-list field 'names'"):
        codec.apply_state_delta(base, {"append": {"names": items}})
    assert base == {"names": current}  # the base is not modified


def test_stored_json_is_compact_sorted_and_keeps_utf8():
    # what a checkpoint costs on disk, and the same bytes for the same state
    assert codec.dumps({"b": [1, 2], "a": "é"}) == '{"a":"é","b":[1,2]}'
    assert codec.dumps({"a": 1, "b": 2}) == codec.dumps({"b": 2, "a": 1})


def test_copy_shares_no_dict_or_list_with_the_original():
    inner = [1, {"deep": [2]}]
    value = {"a": inner, "t": (3, [4]), "s": "text", "n": None, "f": 1.5, "b": True}
    want = {
        "a": [1, {"deep": [2]}],
        "t": [3, [4]],
        "s": "text",
        "n": None,
        "f": 1.5,
        "b": True,
    }
    got = codec.copy(value)
    assert got == want
    assert type(got["t"]) is list and type(got["t"][1]) is list
    inner.append(9)
    inner[1]["deep"].append(9)
    value["t"][1].append(9)
    assert got == want
    assert codec.copy([]) == [] and codec.copy({}) == {} and codec.copy(7) == 7
