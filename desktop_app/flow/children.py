"""Child runs a step started, as journaled in the parent's checkpoint meta.

A step asks :meth:`~desktop_app.flow.context.StepContext.child_run_id` for
the id of each child it starts; the driver records it under
``meta["children"][<step>][<n>] = {"id": ..., "kind": ...}`` in one
checkpoint before the child starts. Forks, replays and forks onto a new
flow version copy that journal, so a re-executed step reattaches.

A canceled run's live children are canceled with it
(:func:`cancel_children`): flow children by the engine itself, other kinds
(agent runs) as registered with :func:`register_child_kind`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from desktop_app.errors import CheckpointNotFoundError, FlowdeskError, RunStateError
from desktop_app.flow.clock import Clock
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


def cancel_children(
    store: CheckpointStore, run_id: str, clock: Clock, cancel_flow: Callable[[str, str], object]
) -> None:
    """Cancel every live child run ``run_id``'s journal names: flow runs with
    ``cancel_flow(child_id, reason)`` (``Engine.cancel``: their own children
    too), other kinds with their registered canceler.

    Raises:
        RunStateError: a child could not be canceled, or is of a kind no
            imported module knows how to cancel (every other child is
            canceled by then).
    """
    reason = f"parent run {run_id} was canceled"
    problems: list[str] = []
    for child_id, kind in journaled(store.latest(run_id).meta):
        if kind == "flow":
            if live(store, child_id):
                cancel_flow(child_id, reason)
            continue
        cancel = canceler(kind)
        if cancel is None:
            problems.append(
                f"{kind} child {child_id}: no imported module cancels {kind!r} children"
            )
            continue
        try:
            cancel(store, child_id, reason, clock.now())
        except FlowdeskError as exc:
            problems.append(f"{kind} child {child_id}: {exc}")
    if problems:
        raise RunStateError(
            f"run {run_id} was canceled, but not all its children: " + "; ".join(problems)
        )


def live(store: CheckpointStore, run_id: str) -> bool:
    """Whether ``run_id`` exists and is not finished (completed, canceled, timed out)."""
    try:
        run = store.get_run(run_id)
    except CheckpointNotFoundError:
        return False  # journaled, but the process died before creating it
    return run.status not in ("completed", "canceled", "timed_out")
