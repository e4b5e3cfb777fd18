"""New runs made from old ones: a replay or a fork of a checkpoint (Agentium
``replay``/``fork``) and a move of a run onto the current version of its flow,
each decided here as a :class:`Seed` (what the new run starts with) that the
engine creates and drives; and the live runs whose flow changed since they
started (:func:`incompatible_runs`).

Reads the store only; imports neither the driver nor the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from desktop_app.errors import (
    CheckpointDecodeError,
    CheckpointNotFoundError,
    FlowVersionMismatchError,
    InputError,
    RunStateError,
)
from desktop_app.flow.children import latest_readable_meta, merge_journals
from desktop_app.flow.context import STORED, ExecutionContext
from desktop_app.flow.definition import AwaitStep, CompiledFlow, WaitStep
from desktop_app.flow.owners import holding
from desktop_app.flow.results import IncompatibleRun
from desktop_app.flow.state import (
    apply_output,
    load_state,
    refuse_unknown_fields,
    upgraded_state,
)
from desktop_app.store.protocol import CheckpointStore, StepRecord, Wait, parse_checkpoint_id

#: checkpoint meta a replay, a fork or a move onto a new flow version carries
#: into the new run: the step count ``max_steps`` caps, the decisions of the
#: conditions entered, and each step's visit count (its keys, see
#: ``StepContext.visit_key``)
CARRIED_META = ("steps_taken", "conditions", "visits")


@dataclass(frozen=True, slots=True)
class Seed:
    """What a new run made from an old one starts with.

    Attributes:
        flow: the flow it runs (the registered version).
        state: its first state.
        context: its context ids (the run id is the new run's).
        parent_run_id: the run it came from.
        frontier: the steps it starts at (empty: nothing left to run).
        steps: the step records it keeps.
        meta: its first checkpoint's meta.
        waits: the waits it is already in (a move onto a new flow version
            keeps the wait its run was in: :func:`carried_waits`).
    """

    flow: CompiledFlow[Any]
    state: BaseModel
    context: ExecutionContext
    parent_run_id: str
    frontier: tuple[str, ...]
    steps: Mapping[str, StepRecord]
    meta: Mapping[str, Any]
    waits: tuple[Wait, ...] = ()


def parse_id(checkpoint_id: str) -> tuple[str, int]:
    """``"<run_id>:<revision>"`` as ``(run_id, revision)``.

    Raises:
        CheckpointNotFoundError: not a checkpoint id.
    """
    try:
        return parse_checkpoint_id(checkpoint_id)
    except ValueError as exc:
        raise CheckpointNotFoundError(str(exc)) from exc


def replay_seed(
    store: CheckpointStore,
    flow_of: Callable[[str, str], CompiledFlow[Any]],
    checkpoint_id: str,
    mutate: Callable[[Any], Any] | Mapping[str, Any] | None,
) -> Seed:
    """The run ``Engine.replay`` starts from ``checkpoint_id`` (see there);
    ``flow_of(name, version)`` is the flow for a run of that version
    (``Engine.flow_of``: a registered mode of it too).

    Raises:
        CheckpointNotFoundError, FlowVersionMismatchError, UnknownFlowError,
        CheckpointDecodeError (the checkpoint's state no longer fits the
        model), pydantic.ValidationError (a changed value does not fit it),
        InputError (the changes name fields the model does not have, or are
        neither a dict nor a state), and what building a registered mode
        raises (``ConfigError``).
    """
    src_id, revision = parse_id(checkpoint_id)
    src = store.get_run(src_id)
    f = flow_of(src.flow_name, src.flow_version)
    if src.flow_version != f.version:
        raise FlowVersionMismatchError(src_id, src.flow_version, f.version)
    cp = store.get_checkpoint(src_id, revision)
    try:
        state = load_state(f.state_type, cp.state, src_id, revision)
    except CheckpointDecodeError:
        if mutate is None or callable(mutate):
            raise
        # the changes may mend what no longer decodes (a field whose type
        # changed): applied to the stored state before it is decoded
        refuse_unknown_fields(f.state_type, dict(mutate))
        state = load_state(f.state_type, {**cp.state, **mutate}, src_id, revision)
    if mutate is not None:
        out = mutate(state.model_copy(deep=True)) if callable(mutate) else dict(mutate)
        model, fields = f.state_type, f.state_type.model_fields
        refuse_unknown_fields(model, out)  # else a "step returned" TypeError
        try:
            state = apply_output(model, state, out)
        except TypeError as exc:  # neither a dict nor a state: nothing ran
            raise InputError(
                f"fork {checkpoint_id}: the changes must be a dict of field updates or a "
                f"{model.__name__}, not {type(out).__name__} (its fields: "
                f"{', '.join(fields)}); nothing was run"
            ) from exc
        state = f.state_type.model_validate(state.model_dump())
    kept = {k: v for k, v in cp.steps.items() if v.status in ("completed", "skipped")}
    meta = {k: v for k, v in cp.meta.items() if k in CARRIED_META}
    meta["replayed_from"] = checkpoint_id
    # children started at or after this checkpoint too: a re-executed step reattaches
    # (its latest checkpoint damaged: the journal of its newest intact one)
    children = merge_journals(cp.meta, latest_readable_meta(store, src_id))
    if children:
        meta["children"] = children
    context = ExecutionContext.model_validate(dict(src.context), context=STORED)
    return Seed(f, state, context, src_id, tuple(cp.frontier), kept, meta)


def upgrade_seed(
    store: CheckpointStore,
    flow_of: Callable[[str], CompiledFlow[Any]],
    run_id: str,
    new_run_id: str,
) -> Seed:
    """The run ``Engine.fork_onto_current`` continues ``run_id`` as, under the
    id ``new_run_id`` (see there).

    Raises:
        CheckpointDecodeError: the state does not fit the current model.
        RunStateError: the step it stopped at no longer exists.
    """
    src = store.get_run(run_id)
    f = flow_of(src.flow_name)
    cp = store.latest(run_id)
    state = upgraded_state(f.state_type, cp.state, run_id, cp.revision)[0]
    missing = [s for s in cp.frontier if s not in f.steps]
    if missing:
        raise RunStateError(
            f"run {run_id} stopped at {missing[0]!r}, which flow {f.name!r} "
            f"{f.version} no longer has, so it cannot go on under this version; end it, "
            "or keep it for the flow's old code"
        )
    kept = {
        k: v
        for k, v in cp.steps.items()
        if v.status == "completed" and (k in f.steps or k in f.nested)
    }
    # as in replay: a condition it entered stays decided (its nested steps
    # may have changed the state its predicate reads), its step count goes on
    meta: dict[str, Any] = {k: v for k, v in cp.meta.items() if k in CARRIED_META}
    meta.update({"forked_from_version": src.flow_version, "forked_from": cp.id})
    children = merge_journals(cp.meta)
    if children:  # the new run's steps reattach to the children already started
        meta["children"] = children
    waits = carried_waits(f, cp.waits, cp.frontier, state, run_id, new_run_id)
    if waits:  # the next wait of those steps is numbered on from the carried one
        seq = cp.meta.get("wait_seq", {})
        meta["wait_seq"] = {w.step_id: seq[w.step_id] for w in waits if w.step_id in seq}
    context = ExecutionContext.model_validate(dict(src.context), context=STORED)
    return Seed(f, state, context, run_id, tuple(cp.frontier), kept, meta, waits)


def carried_waits(
    flow: CompiledFlow[Any],
    waits: Iterable[Wait],
    frontier: Iterable[str],
    state: BaseModel,
    old_run_id: str,
    new_run_id: str,
) -> tuple[Wait, ...]:
    """The waits of run ``old_run_id`` that its move onto ``flow`` keeps, as
    waits of ``new_run_id``: a wait step's (or an await step's) wait for a
    step of ``frontier`` that ``flow`` still has as the same wait, on the
    same signal name and key (``key(state)`` for a key function) or event
    type. Its deadline and start stay as stored, so a sleep is not slept
    again, a timeout counts from when the wait began, and the step's
    ``on_enter`` (a one-shot effect) does not run again. Any other wait
    begins anew in the new run."""
    kept: list[Wait] = []
    front = set(frontier)
    for wait in waits:
        step = flow.steps.get(wait.step_id)
        if wait.step_id not in front or not _same_wait(step, wait, state):
            continue
        tail = wait.wait_id.removeprefix(f"{old_run_id}:")
        kept.append(replace(wait, wait_id=f"{new_run_id}:{tail}"))
    return tuple(kept)


def _same_wait(step: Any, wait: Wait, state: BaseModel) -> bool:
    """Whether ``step`` (the new flow's) waits the way ``wait`` waits."""
    if isinstance(step, AwaitStep):
        return wait.kind == "input"
    if not isinstance(step, WaitStep) or step.wait_kind != wait.kind or step.name != wait.name:
        return False
    if step.wait_kind != "signal":
        return True
    try:
        key = step.key(state) if callable(step.key) else step.key
    except Exception:  # the new run's own begin says what is wrong with it
        return False
    return bool(key == wait.key)


def incompatible_runs(
    store: CheckpointStore, flows: Iterable[CompiledFlow[Any]], now: float
) -> list[IncompatibleRun]:
    """The live runs ``Engine.incompatible_runs`` lists (see there); ``now``
    decides lease expiry."""
    out: list[IncompatibleRun] = []
    for f in flows:
        for run in store.runs_of_other_versions(f.name, f.version):
            if run.flow_version in f.variants:
                continue
            if holding(run.lease_owner, run.lease_expires_at, now) == "held":
                continue
            cp = store.latest(run.run_id)
            step = cp.frontier[0] if cp.frontier else ""
            out.append(
                IncompatibleRun(
                    run.run_id, run.flow_name, run.status, step, run.flow_version, f.version
                )
            )
    return out
