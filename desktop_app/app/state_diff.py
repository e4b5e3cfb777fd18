"""Differences between two JSON-mode states, and the text the screens show
for JSON values (pure functions: no Textual, no I/O).

:func:`diff_states` walks nested objects key by key and lists index by
index, so a change deep inside a state is reported at its own path
(``files[2].summary``) rather than as a whole new top-level value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

ChangeKind = Literal["added", "removed", "changed"]

#: Characters of a value shown before it is cut with an ellipsis.
VALUE_CHARS = 80


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: ``path`` (``a.b[2].c``), its kind and the two values
    (``old`` is ``None`` for ``added``, ``new`` is ``None`` for ``removed``)."""

    path: str
    kind: ChangeKind
    old: Any = None
    new: Any = None


def child_path(parent: str, key: str | int) -> str:
    """``parent.key`` for object keys, ``parent[i]`` for list indexes."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


def diff_states(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    """What changed from ``old`` to ``new`` (two JSON-mode state dicts).

    Keys are visited in ``old``'s order, then the keys only ``new`` has; a
    value that changes type (an object becoming a list, say) is one change.
    """
    changes: list[Change] = []
    _diff(old, new, "", changes)
    return changes


def _diff(old: Any, new: Any, path: str, out: list[Change]) -> None:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in old:
            sub = child_path(path, str(key))
            if key in new:
                _diff(old[key], new[key], sub, out)
            else:
                out.append(Change(sub, "removed", old=old[key]))
        for key in new:
            if key not in old:
                out.append(Change(child_path(path, str(key)), "added", new=new[key]))
        return
    if _is_list(old) and _is_list(new):
        for i in range(min(len(old), len(new))):
            _diff(old[i], new[i], child_path(path, i), out)
        for i in range(len(new), len(old)):
            out.append(Change(child_path(path, i), "removed", old=old[i]))
        for i in range(len(old), len(new)):
            out.append(Change(child_path(path, i), "added", new=new[i]))
        return
    if type(old) is not type(new) or old != new:  # 1 and 1.0, or True and 1, differ
        out.append(Change(path, "changed", old=old, new=new))


def ordered(state: Mapping[str, Any], order: Sequence[str] | None) -> dict[str, Any]:
    """``state`` with its top-level keys in ``order`` (a model's field order),
    then any keys ``order`` lacks, as stored."""
    if not order:
        return dict(state)
    first = {k: state[k] for k in order if k in state}
    return first | {k: v for k, v in state.items() if k not in first}


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Top-level keys of ``new`` whose value differs from (or is missing in) ``old``."""
    return [k for k in new if k not in old or bool(diff_states({k: old[k]}, {k: new[k]}))]


def value_text(value: Any, limit: int = VALUE_CHARS) -> str:
    """A JSON value on one line, cut to ``limit`` characters with ``…``."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # a circular structure: never in a JSON-mode state
        text = repr(value)
    return shorten(text, limit)


def shorten(text: str, limit: int = VALUE_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with ``…``."""
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def change_text(change: Change, limit: int = VALUE_CHARS) -> str:
    """``old → new`` for a change, the value alone for an addition or removal."""
    if change.kind == "added":
        return value_text(change.new, limit)
    if change.kind == "removed":
        return value_text(change.old, limit)
    return f"{value_text(change.old, limit)} → {value_text(change.new, limit)}"
