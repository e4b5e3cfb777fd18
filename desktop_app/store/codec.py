"""Delta encoding of checkpoints: bytes written grow with what a step changed.

A checkpoint's state is a JSON object with one key per state field. Revision 0
(and the oldest checkpoint left after pruning) is stored whole, a *snapshot*;
every later revision stores only a *delta* against the revision before it:

``{"set": {field: value}, "append": {field: [items]}, "unset": [field]}``

``append`` is used when a list field's old value is a prefix of its new
value, so a list that grows by one item per step costs one item per step, not
the whole list. Step records are stored the same way: only the records that
changed. Reading folds the deltas onto the nearest snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

import orjson

JSON = Any


def dumps(value: JSON) -> str:
    """Compact, deterministic JSON (sorted keys, UTF-8 kept).

    Encoded by orjson (~10x faster) when that gives the same value back on
    :func:`loads`; else by the standard library, which also writes what
    orjson cannot: ``NaN``/``Infinity`` (orjson would write ``null``, so any
    output holding ``null`` is re-encoded), integers beyond 64 bits, non-str
    keys, lone surrogates. Both write the shortest float repr that reads
    back as the same float, and sort keys by code point. An output holding
    ``null`` is re-encoded only when the value holds a float orjson may
    write otherwise (see :func:`_may_differ`): a ``None`` alone (a run's
    context, an optional field) costs a walk of the value, not a second,
    slower encoding.
    """
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: big int, non-str key, surrogate...
        pass
    else:
        # searched in the text: ``b"null" in data`` first tries the operand
        # as a byte value, raising and clearing a TypeError each time (~1,800
        # instructions, three times a step)
        if "null" not in text or not _may_differ(value):
            return text
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def orjson_float_alike(x: float) -> bool:
    """Whether orjson writes float ``x`` as the standard library does: zero,
    or a finite value Python prints without an exponent (``1e-4 <= |x| <
    1e16``); NaN and the infinities are neither (orjson writes ``null``)."""
    return x == 0.0 or 1e-4 <= abs(x) < 1e16


def _may_differ(value: JSON) -> bool:
    """Whether orjson's text of ``value`` may differ from the standard
    library's: it holds a float that is not finite (orjson writes ``null``)
    or that Python prints with an exponent (``1e16``: the standard library
    writes ``1e+16``), or a value of another type than JSON's own."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return False
    if kind is float:
        return not orjson_float_alike(value)
    if kind is dict:
        value = value.values()
    elif kind is not list and kind is not tuple:
        return True
    # a loop, not ``any`` over a generator (a call per item): a run's
    # context, six strings or None, is walked at every run's creation
    for v in value:
        k = type(v)
        if k is str or v is None or k is int or k is bool:
            continue
        if _may_differ(v):
            return True
    return False


def copy(value: JSON) -> JSON:
    """A deep copy of a JSON value: new dicts and lists all the way down
    (tuples become lists, as a stored row reads back); strings, numbers,
    booleans and ``None`` are immutable and shared. Does not check that the
    value is JSON (:func:`dumps` does, when it is written)."""
    kind = type(value)
    if kind is dict:
        return {k: copy(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [copy(v) for v in value]
    return value


def loads(text: str | bytes) -> JSON:
    """Parse JSON written by :func:`dumps` (the standard library: orjson
    would read integers beyond 64 bits as floats and refuse ``NaN``)."""
    return json.loads(text)


def diff_state(
    old: Mapping[str, JSON], new: Mapping[str, JSON], changed: Collection[str] | None = None
) -> dict[str, JSON]:
    """The delta that turns ``old`` into ``new`` (see module docstring).

    ``changed``: the keys whose values may differ (the writer knows them);
    every other key present in both is taken as equal, not compared, so the
    diff costs what changed, not the size of the values kept. ``None``:
    compare every key."""
    sets: dict[str, JSON] = {}
    appends: dict[str, JSON] = {}
    for key in new if changed is None else changed:
        if key not in new:
            continue
        value = new[key]
        if key not in old:
            sets[key] = value
            continue
        before = old[key]
        if before is value or before == value:
            continue
        if (
            isinstance(before, list)
            and isinstance(value, list)
            and len(value) > len(before)
            and value[: len(before)] == before
        ):
            appends[key] = value[len(before) :]
        else:
            sets[key] = value
    delta: dict[str, JSON] = {}
    if sets:
        delta["set"] = sets
    if appends:
        delta["append"] = appends
    if not new.keys() >= old.keys():  # a set comparison in C, before a loop in Python
        delta["unset"] = [k for k in old if k not in new]
    return delta


def apply_state_delta(base: Mapping[str, JSON], delta: Mapping[str, JSON]) -> dict[str, JSON]:
    """``base`` with ``delta`` applied; ``base`` is not modified.

    Raises:
        ValueError / KeyError / TypeError: the delta does not fit the base
        (the caller turns this into ``CheckpointDecodeError``).
    """
    out = dict(base)
    for key, value in delta.get("set", {}).items():
        out[key] = value
    for key, items in delta.get("append", {}).items():
        current = out[key]
        if not isinstance(current, list) or not isinstance(items, list):
            raise TypeError(f"append delta on non-list field {key!r}")
        out[key] = current + items
    for key in delta.get("unset", []):
        out.pop(key, None)
    return out
