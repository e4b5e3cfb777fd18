"""New runs from an old run's checkpoint: ``replay`` and ``fork``.

Both go through :meth:`desktop_app.flow.Engine.replay` (``fork`` is a replay
with changed state fields, :meth:`~desktop_app.flow.Engine.fork`; the names
follow Agentium's ``replay``/``fork``, as the app's Replay and Fork keys
do). The new run starts from the checkpoint's state and next step under a
new id, with the source as its ``parent_run_id``; the steps completed
before the checkpoint are kept (not run again), a step after it runs again,
and a child run (an agent's model call) a re-executed step had started is
reattached, never started twice. The source run and its history are not
touched. The flow must still be the version the source ran (exit 1
otherwise, before ``--changes`` are read: a live run's refusal names
``resume`` once its code is restored, and ``cancel``).

``CHECKPOINT`` is ``RUN`` (its first kept checkpoint, revision 0 unless
``keep_last_n`` pruned it: the run's start, so the whole flow runs again on
the same input) or ``RUN:REVISION`` as ``flowdesk show RUN`` lists them.
Like ``run``/``start``, the new run's id is the first line of stdout; before
it executes, stderr names the steps it runs again (their side effects are
made again) and a first kept checkpoint that is not the run's start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from desktop_app.cli.common import Ctx, parse_json
from desktop_app.cli.output import step_listener
from desktop_app.errors import FlowdeskError, InputError, UnknownRunError

if TYPE_CHECKING:
    from desktop_app.bootstrap import Services


def checkpoint_of(ctx: Ctx, sv: Services, text: str) -> str:
    """``RUN`` or ``RUN:REVISION`` (``RUN`` a unique prefix) → the stable
    checkpoint id ``"<run_id>:<revision>"`` of a kept checkpoint.

    Raises:
        UnknownRunError, AmbiguousRunIdError: no such run (exit 2).
        InputError: an agent run, or a revision the run does not have
            (kept), naming the ones it has (exit 2).
        CheckpointCorruptError: the run has no checkpoint left (deleted
            outside Flowdesk), with the commands that work on it.
    """
    # a child run's id has colons of its own (PARENT:step): the revision is
    # the last part, when it is a number
    run_text, sep, rev_text = text.rpartition(":")
    if not sep or not rev_text.isdigit():
        try:
            ref = ctx.resolve(sv, text)
        except UnknownRunError:
            if sep and _names_a_run(ctx, sv, run_text):  # RUN:x, a typo of a revision
                raise InputError(f"{text!r}: the revision after ':' must be a number") from None
            raise
        rev_text = ""
    else:
        ref = ctx.resolve(sv, run_text)
    if ref.kind == "agent":
        raise InputError(
            f"run {ref.run_id} is an agent run; replay and fork take flow runs "
            f"(resume an agent run with `{ctx.hints.cmd('resume ' + ref.run_id)}`)"
        )
    kept = [info.revision for info in sv.checkpoints.history(ref.run_id)]
    if not kept:  # every row deleted outside Flowdesk: the damage, with what works
        sv.checkpoints.latest(ref.run_id)  # raises CheckpointCorruptError
        raise InputError(f"run {ref.run_id} has no checkpoint left to start from")
    if not rev_text:
        return f"{ref.run_id}:{kept[0]}"
    revision = int(rev_text)
    if revision not in kept:
        raise InputError(
            f"run {ref.run_id} has no checkpoint {revision}; it keeps {_ranges(kept)} "
            f"(`{ctx.hints.cmd('show ' + ref.run_id)}` lists them)"
        )
    return f"{ref.run_id}:{revision}"


def _names_a_run(ctx: Ctx, sv: Services, text: str) -> bool:
    """Whether ``text`` resolves to a run (an id or a unique prefix)."""
    try:
        ctx.resolve(sv, text)
    except FlowdeskError:
        return False
    return True


def _ranges(revisions: list[int]) -> str:
    if revisions == list(range(revisions[0], revisions[-1] + 1)):
        return f"revisions {revisions[0]} to {revisions[-1]}"
    return "revisions " + ", ".join(map(str, revisions))


def _changes(ctx: Ctx, sv: Services, checkpoint: str) -> dict[str, Any]:
    """``fork --changes``: a JSON object of the flow's state fields.

    Raises:
        InputError: not JSON, not an object, empty, or a key the flow's state
            does not have (naming the nearest); a missing folder for the
            built-in flows (exit 2).
    """
    from desktop_app.cli.start import unknown_keys
    from desktop_app.flows import check_builtin_input

    changes = parse_json(ctx.args.changes, "--changes")
    if not isinstance(changes, dict) or not changes:
        raise InputError(
            "--changes must be a JSON object of the state fields to change, e.g. "
            f'\'{{"order": "o-2"}}\' (to run again unchanged: '
            f"`{ctx.hints.cmd('replay ' + checkpoint)}`)"
        )
    flow = sv.engine.flow(sv.checkpoints.get_run(checkpoint.partition(":")[0]).flow_name)
    unknown_keys(flow, changes, "--changes")
    return check_builtin_input(flow.name, changes)


def _same_version(sv: Services, run_id: str) -> None:
    """Refuse a replay or fork of a run whose flow changed since it ran
    (before ``--changes`` are read, so no hint points at a replay that is
    refused the same way).

    Raises:
        FlowVersionMismatchError: a live run (the CLI names what finishes or
            ends it).
        FlowError: a run that ended: replay and fork need its flow's code
            as it was.
    """
    from desktop_app.cli.runs import stuck_on_version
    from desktop_app.errors import FlowError, FlowVersionMismatchError

    run = sv.checkpoints.get_run(run_id)
    flow = sv.engine.flows.get(run.flow_name)
    if flow is None or sv.engine.runs_version(run.flow_name, run.flow_version):
        return  # an unknown flow is refused by the replay itself
    stuck = stuck_on_version(sv, run)
    if stuck is not None:
        raise stuck
    what = FlowVersionMismatchError(run_id, run.flow_version, flow.version).what
    raise FlowError(
        f"{what} Replay and fork start from the flow's code as it was when the run ran: "
        f"restore it (the steps that make version {run.flow_version}), then replay or fork "
        "it again."
    )


def _say_run_again(sv: Services, checkpoint: str, *, implied: bool) -> None:
    """Before a replay or fork from ``checkpoint`` executes: which steps it
    runs again, whose side effects are made again (stderr; the app's
    Replay dialog says the same before it asks), and that a ``RUN`` given
    without a revision (``implied``) starts from its first kept checkpoint when
    ``keep_last_n`` pruned the ones before it (a tryout: a replay of a
    pruned run made its last step's post again without a word)."""
    import sys

    from desktop_app.runs_view import steps_run_again
    from desktop_app.words import listing

    run_id, _, rev = checkpoint.rpartition(":")
    history = sv.checkpoints.history(run_id)
    revision = int(rev)
    if implied and revision:
        print(
            f"revision {revision} is the first checkpoint run {run_id} keeps (its flow "
            "prunes older ones: keep_last_n)",
            file=sys.stderr,
        )
    again = steps_run_again(history, revision)
    if again:
        what = "what they did" if len(again) > 1 else "what it did"
        print(
            f"runs again: {listing(again)}; {what} (files moved or written, messages sent) "
            "is done again",
            file=sys.stderr,
        )


def _branch(ctx: Ctx, fork: bool) -> int:
    from pydantic import ValidationError

    from desktop_app.cli.start import execute_new_run, fit_problems, report_result
    from desktop_app.flow import EventBus

    events = EventBus()
    events.subscribe(step_listener(ctx.args.quiet))
    sv = ctx.services(events=events)
    checkpoint = checkpoint_of(ctx, sv, ctx.args.checkpoint)
    _same_version(sv, checkpoint.partition(":")[0])
    changes = _changes(ctx, sv, checkpoint) if fork else None
    # RUN alone (checkpoint_of's reading): its first kept checkpoint
    _say_run_again(sv, checkpoint, implied=not ctx.args.checkpoint.rpartition(":")[2].isdigit())
    engine = sv.engine
    try:
        result = execute_new_run(
            ctx,
            sv,
            lambda rid: (
                engine.fork(checkpoint, changes, run_id=rid)
                if changes is not None
                else engine.replay(checkpoint, run_id=rid)
            ),
        )
    except ValidationError as exc:  # validated before the new run exists
        raise InputError(f"--changes do not fit the run's state: {fit_problems(exc)}") from exc
    return report_result(ctx, result, sv)


def cmd_replay(ctx: Ctx) -> int:
    """``flowdesk replay CHECKPOINT``: the flow again from that checkpoint, as a new run."""
    return _branch(ctx, fork=False)


def cmd_fork(ctx: Ctx) -> int:
    """``flowdesk fork CHECKPOINT --changes JSON``: a replay with those state fields changed."""
    return _branch(ctx, fork=True)
