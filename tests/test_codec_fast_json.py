"""The checkpoint codec's JSON (orjson fast path, standard library for what
orjson cannot write exactly) reads back exactly what the standard library
alone would: same values, NaN and infinities, big integers, any text."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from desktop_app.store import codec

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # lone surrogates included
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and str(a) == str(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=400, deadline=None)
@given(_json)
def test_round_trip_equals_the_standard_library(value):
    try:
        reference = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return
    text = codec.dumps(value)
    assert isinstance(text, str)
    assert _same(codec.loads(text), json.loads(reference))
    assert _same(json.loads(text), json.loads(reference))  # any JSON reader agrees


def test_values_orjson_would_change_are_written_by_the_standard_library():
    for value, expected in [
        (float("nan"), "NaN"),
        ({"x": float("inf")}, '{"x":Infinity}'),
        (2**70, str(2**70)),
        ({1: 2}, '{"1":2}'),
        ("\ud800", '"\ud800"'),
    ]:
        assert codec.dumps(value) == expected
        back = codec.loads(codec.dumps(value))
        assert _same(back, json.loads(expected))


def test_keys_sorted_and_compact_like_before():
    value = {"b": [1, 2.5, "é"], "a": {"z": True, "y": None}, "é": 1e16}
    assert codec.dumps(value) == json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, sort_keys=True
    )
    assert codec.dumps({"b": 1, "a": [0.1, 1e-7]}) == '{"a":[0.1,1e-7],"b":1}'


def test_a_none_beside_plain_values_is_written_by_orjson_exactly_as_before(monkeypatch):
    """A ``null`` in the output no longer sends a value to the standard
    library unless it holds a float orjson writes otherwise: the text is the
    same, and ``json.dumps`` is not called for it."""
    value = {"tenant_id": None, "run_id": "r1", "n": 2, "x": 0.5, "items": [None, "a", True]}
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    calls: list[object] = []
    real = json.dumps
    monkeypatch.setattr(codec.json, "dumps", lambda v, **kw: calls.append(v) or real(v, **kw))
    assert codec.dumps(value) == expected
    assert calls == []
    assert codec.dumps({"y": None, "big": 1e16}) == '{"big":1e+16,"y":null}'
    assert codec.dumps({"y": None, "nan": float("nan")}) == '{"nan":NaN,"y":null}'
    assert len(calls) == 2
