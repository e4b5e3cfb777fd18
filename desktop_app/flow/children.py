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

from desktop_app.errors import (
    CheckpointCorruptError,
    CheckpointNotFoundError,
    FlowdeskError,
    RunStateError,
)
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
    for child_id, kind in _children_of(store, run_id):
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


def latest_readable_meta(store: CheckpointStore, run_id: str) -> Mapping[str, Any]:
    """The meta of run ``run_id``'s latest checkpoint; when that one is
    damaged (:class:`~desktop_app.errors.CheckpointCorruptError`), the meta
    of its newest intact revision below the damage (empty when none is).

    Raises:
        CheckpointNotFoundError: no such run.
        CheckpointDecodeError: the latest checkpoint cannot be decoded for
            another reason than damage (not for a damaged row).
    """
    try:
        return store.latest(run_id).meta
    except CheckpointCorruptError as exc:
        if exc.run_id != run_id or exc.readable is None:
            return {}
        return store.get_checkpoint(run_id, exc.readable).meta


def _children_of(store: CheckpointStore, run_id: str) -> list[tuple[str, str]]:
    """``(child_id, kind)`` of the children to cancel with ``run_id``: its
    latest journal; when its latest checkpoint is damaged, the journal of
    its newest intact revision plus every flow run whose id says it is a
    child of it (``"<run_id>:..."``, :meth:`StepContext.child_run_id`), as
    the damaged revision may have journaled more."""
    try:
        return journaled(store.latest(run_id).meta)
    except CheckpointCorruptError:
        pass
    found = journaled(latest_readable_meta(store, run_id))
    known = {child_id for child_id, _kind in found}
    for run in store.list_runs(run_id_prefix=f"{run_id}:"):
        if run.run_id not in known:
            found.append((run.run_id, "flow"))
    return found


def live(store: CheckpointStore, run_id: str) -> bool:
    """Whether ``run_id`` exists and is not finished (completed, canceled, timed out)."""
    try:
        run = store.get_run(run_id)
    except CheckpointNotFoundError:
        return False  # journaled, but the process died before creating it
    return run.status not in ("completed", "canceled", "timed_out")
