"""Child runs a step started, as journaled in the parent's checkpoint meta.

A step asks :meth:`~desktop_app.flow.context.StepContext.child_run_id` for
the id of each child it starts; the driver records it under
``meta["children"][<step>][<n>] = {"id": ..., "kind": ...}`` in one
checkpoint before the child starts. Forks, replays and forks onto a new
flow version copy that journal, so a re-executed step reattaches.

Flow children are canceled by the engine itself; other kinds (agent runs)
register how to cancel one with :func:`register_child_kind`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from desktop_app.store.protocol import CheckpointStore

#: ``cancel(store, child_id, reason, now)``: cancel that child if it is still live
ChildCanceler = Callable[[CheckpointStore, str, str, float], None]

_CANCELERS: dict[str, ChildCanceler] = {}


def register_child_kind(kind: str, cancel: ChildCanceler) -> None:
    """Say how to cancel a child of ``kind`` (for example ``"agent"``)."""
    _CANCELERS[kind] = cancel


def canceler(kind: str) -> ChildCanceler | None:
    """How to cancel a child of ``kind``, or ``None`` when no module registered one."""
    return _CANCELERS.get(kind)


def journaled(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(child_id, kind)`` of every child in a checkpoint's meta, in step order."""
    out: list[tuple[str, str]] = []
    for slots in dict(meta.get("children", {})).values():
        for slot in slots:
            out.append((str(slot["id"]), str(slot.get("kind", "flow"))))
    return out


def merge_journals(*metas: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """One journal holding every slot of ``metas`` (earlier ones win a slot)."""
    merged: dict[str, list[dict[str, Any]]] = {}
    for meta in metas:
        for key, slots in dict(meta.get("children", {})).items():
            have = merged.setdefault(key, [])
            for i, slot in enumerate(slots):
                if i >= len(have):
                    have.append(dict(slot))
    return merged
