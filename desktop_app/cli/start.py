"""Starting and feeding runs: ``run digest|tidy``, ``start``, ``answer``,
``signal``, ``publish``.

``run`` and ``start`` print the run id alone on the first line of stdout
(before any step runs), so a terminal or script holds it even after a
``kill -9``. Built-in flows are single-flight per input: re-running one on
the same input while an interrupted (or failed) run of it exists resumes
that run instead of starting a duplicate. ``--new`` (or answering n on a
terminal) replaces it: the unfinished run is canceled and the new run takes
its flow key, so there is never more than one unfinished run per input and
a later re-run resumes the new one (Temporal's ``TERMINATE_EXISTING``
conflict policy).
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from desktop_app.cli.common import (
    Ctx,
    json_option,
    parse_json,
    read_answer,
    read_text_option,
    value_arg,
)
from desktop_app.cli.output import EXIT_FAILED, EXIT_OK, step_listener
from desktop_app.config import nearest_key
from desktop_app.errors import (
    ENDED_RUN_STATUSES,
    CheckpointDecodeError,
    CheckpointNotFoundError,
    ConfigError,
    DiskFullError,
    FlowdeskError,
    InputError,
    RunLeasedError,
    RunStateError,
)
from desktop_app.flow.owners import holding
from desktop_app.flows import live_twin, single_flight
from desktop_app.runs_view import (
    INTENT_NOUNS,
    display_status,
    no_signal_waiter,
    queued_text,
    signal_reach,
    signal_waits,
    unsettled_text,
    withdrawn_text,
)
from desktop_app.textsafe import quoted, shell_quote
from desktop_app.words import plural


def unknown_keys(flow: Any, given: dict[str, Any], what: str = "--input") -> None:
    """Keys of ``given`` (``--input``, ``fork --changes``) the flow's state
    model does not have are errors naming the nearest valid key (checked
    before anything is created).

    Raises:
        InputError: the first unknown key (exit 2)."""
    fields = flow.state_type.model_fields
    for key in given:
        if key not in fields:
            hint = nearest_key(key, flow.state_type)
            tail = f"did you mean {hint!r}?" if hint else f"valid keys: {', '.join(fields)}."
            raise InputError(
                f"{what} has unknown key {key!r} for flow {flow.name!r}; {tail} "
                "Nothing was created."
            )


def _resume_twin(run: Any, now: float) -> bool:
    """Resume the interrupted twin? On a terminal the user is asked (default
    yes); otherwise it is resumed, and stderr says so. Its status is the one
    ``runs`` shows at ``now`` (UTC epoch seconds): ``interrupted``, not the
    stored ``running``, for a run whose process stopped."""
    status = display_status(run, now)
    at = f"at {run.progress[0]}/{run.progress[1]}" if run.progress else "not finished"
    if sys.stdin.isatty() and sys.stderr.isatty():
        print(
            f"run {run.run_id} on this input is {status} ({at}). Resume it? "
            "[Y/n; n cancels it and starts a new run] ",
            end="",
            file=sys.stderr,
            flush=True,
        )
        return sys.stdin.readline().strip().lower() not in ("n", "no")
    print(f"resuming {status} run {run.run_id} on this input ({at})", file=sys.stderr)
    return True


def _run_or_resume(
    ctx: Ctx, sv: Any, flow: str, given: Any, flow_key: str | None, *, new: bool = False
) -> Any:
    """Print the run id first (only once the run exists: bad input or a
    read-only database print no id), then execute it. A live run with the same
    flow key is resumed (interrupted or failed) or reported (waiting)
    instead of being duplicated; one another live process executes is
    refused with ``RunLeasedError`` (nothing runs here). With ``new``
    (``--new``), or when the user declines to resume on a terminal, that run
    is canceled instead and the new run takes the key (:func:`_replace`)."""
    from desktop_app.bootstrap import run_context

    context = run_context(sv.settings)  # a bad TRACEPARENT: refused before anything
    twin = live_twin(sv.checkpoints, flow, flow_key) if flow_key else None
    if twin is not None and twin.status == "waiting" and not new:
        print(twin.run_id, flush=True)
        ctx.current_run = twin.run_id
        print(f"run {twin.run_id} on this input is waiting already", file=sys.stderr)
        return sv.engine.run(flow, given, flow_key=flow_key)  # the live run's result
    now = sv.checkpoints.now()
    if twin is not None and twin.lease_owner is not None and not new:
        held = holding(twin.lease_owner, twin.lease_expires_at, now) == "held"
        if held:  # another live process executes it: said as such, not "resuming" first
            raise RunLeasedError(twin.run_id, twin.lease_owner, twin.lease_expires_at)
    if twin is not None:
        if not new and _resume_twin(twin, now):
            print(twin.run_id, flush=True)
            ctx.current_run = twin.run_id
            return sv.engine.resume(twin.run_id)
        _replace(sv, twin)
    return execute_new_run(
        ctx,
        sv,
        lambda rid: sv.engine.run(flow, given, run_id=rid, flow_key=flow_key, context=context),
    )


def _replace(sv: Any, twin: Any) -> None:
    """Cancel ``twin``, the unfinished run a new run on the same input
    replaces, saying so on stderr; a twin that ended meanwhile is left as it
    ended. A process still driving it stops before its next step (as
    ``flowdesk cancel``)."""
    status = display_status(twin, sv.checkpoints.now())
    try:
        done = sv.engine.cancel_withdrawing(
            twin.run_id, reason="replaced by a new run on the same input"
        )
    except RunStateError:
        return  # it completed, or someone canceled it: the key is free either way
    withdrawn = withdrawn_text(
        twin.flow_name, len(done.withdrawn), len(done.made), len(done.unknown)
    )
    print(
        f"canceled {status} run {twin.run_id} on this input"
        + (f" ({withdrawn})" if withdrawn else "")
        + "; starting a new run",
        file=sys.stderr,
    )


def execute_new_run(ctx: Ctx, sv: Any, job: Callable[[str], Any]) -> Any:
    """Run ``job(run_id)`` for a new run id, printing that id alone on
    stdout once the run is stored, before its first step (the engine's
    ``RunStarted``); a job whose run never starts a step (a live run with
    the same flow key was the answer, a replay of a finished checkpoint)
    has its result's id printed after it. Returns the job's ``RunResult``."""
    from desktop_app.flow.events import RunStarted

    rid = uuid.uuid4().hex
    printed = False

    def print_id(event: object) -> None:
        nonlocal printed
        if isinstance(event, RunStarted) and event.run_id == rid and not printed:
            printed = True
            print(rid, flush=True)
            ctx.current_run = rid

    unsubscribe = sv.engine.events.subscribe(print_id)
    try:
        result = job(rid)
    finally:
        unsubscribe()
    if not printed:
        print(result.run_id, flush=True)
        ctx.current_run = result.run_id
    return result


def fit_problems(exc: Any) -> str:
    """A pydantic ``ValidationError`` as ``field.path: message; ...``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())


def timed_out_hints(ctx: Ctx, run_id: str) -> list[str]:
    """What a command that saw run ``run_id`` time out prints (lines, with
    the user's ``--db``/``--scope``): a timed-out run cannot be resumed, so
    ``show`` (what it did) and ``replay`` (its flow again from its start, as
    a new run)."""
    again = ctx.hints.cmd("replay " + run_id)
    return [
        f"what it did: {ctx.hints.cmd('show ' + run_id)}",
        f"run it again from its start, as a new run: {again}",
    ]


def cannot_continue(error: str | None) -> bool:
    """Whether a failed run's ``error`` is a step's
    :class:`~desktop_app.errors.RunCannotContinueError` (the driver records
    a step's failure as ``TYPE: MESSAGE``): no resume can take it further."""
    from desktop_app.errors import RunCannotContinueError

    return error is not None and f"{RunCannotContinueError.__name__}: " in error


def report_result(ctx: Ctx, result: Any, sv: Any = None) -> int:
    """Print a run's outcome and hints that work as printed (``resume`` for a
    failed run; ``show``, and ``replay`` from its start, for a timed-out run,
    which cannot be resumed; with ``sv``, the services that ran it, that a
    completed run is kept until its side effects are delivered, when its
    flow deletes completed runs); the exit code: 1 failed, timed out or
    canceled (by `cancel` or `--new` from another process while this one
    executed it: a script must not take the run for a success), else 0."""
    print(f"run {result.run_id} {result.status}")
    if result.status == "completed" and getattr(result.state, "report_path", None):
        print(f"report: {result.state.report_path}")
    if result.status == "completed" and sv is not None:
        say_kept(ctx, sv, result.run_id)
    return report_hints(ctx, result.run_id, result.status, result.error)


def report_hints(ctx: Ctx, run_id: str, status: str, error: str | None) -> int:
    """Print (on standard error) a run's error and the hints that work on it
    as printed, after its status was said (:func:`report_result`); the exit
    code: 1 failed, timed out or canceled, else 0."""
    if error:
        print(f"error: {error}", file=sys.stderr)
    if status == "failed":
        if not cannot_continue(error):  # else a resume fails the same way
            print(f"resume with: {ctx.hints.cmd('resume ' + run_id)}", file=sys.stderr)
        return EXIT_FAILED
    if status == "timed_out":
        for line in timed_out_hints(ctx, run_id):
            print(line, file=sys.stderr)
        return EXIT_FAILED
    if status == "canceled":  # it cannot be resumed; `show` says what it did
        print(f"what it did: {ctx.hints.cmd('show ' + run_id)}", file=sys.stderr)
        return EXIT_FAILED
    if status == "waiting":
        hint = ctx.hints.cmd(f"show {run_id}")
        print(f"it waits; what for, and the command that answers it: {hint}", file=sys.stderr)
    return EXIT_OK


def cmd_run(ctx: Ctx) -> int:
    from desktop_app.flow import EventBus

    a = ctx.args
    if a.flow == "tidy":
        given, key = single_flight("tidy", {"folder": str(a.folder)})
    else:
        given, key = single_flight("digest", {"folder": str(a.folder), "out": str(a.out)})
    events = EventBus()
    events.subscribe(step_listener(a.quiet))
    sv = ctx.services(events=events)
    if a.flow == "digest" and a.model:
        from desktop_app.bootstrap import build_model, digest_with_model

        if build_model(sv.settings) is None:
            raise ConfigError(
                "--model needs a configured model: set FLOWDESK_MODEL__BASE_URL and "
                "FLOWDESK_MODEL__MODEL"
            )
        sv.engine.register(digest_with_model(sv.settings, sv.agents))
    return report_result(ctx, _run_or_resume(ctx, sv, a.flow, given, key, new=a.new), sv)


def cmd_start(ctx: Ctx) -> int:
    from pydantic import ValidationError

    from desktop_app.errors import UnknownFlowError

    a = ctx.args
    given = json_option(a.input, a.input_file, "--input", "{}")
    if not isinstance(given, dict):
        raise InputError('--input must be a JSON object, e.g. \'{"order": "o-1"}\'')
    sv = ctx.services()
    try:
        flow = sv.engine.flow(a.flow)
    except UnknownFlowError as exc:
        import difflib

        names = sorted(sv.engine.flows)
        near = difflib.get_close_matches(a.flow, names, n=1)
        meant = f"; did you mean {near[0]!r}?" if near else ";"
        raise InputError(
            f"no flow named {a.flow!r} is registered{meant} registered flows: "
            f"{', '.join(names)} (`{ctx.hints.cmd('flows')}`)"
        ) from exc
    unknown_keys(flow, given)
    given, builtin_key = single_flight(a.flow, given)
    key = a.flow_key if a.flow_key is not None else builtin_key
    try:
        result = _run_or_resume(ctx, sv, a.flow, given, key, new=a.new)
    except ValidationError as exc:
        raise InputError(f"--input does not fit flow {a.flow!r}: {fit_problems(exc)}") from exc
    return report_result(ctx, result, sv)


def _answer_command(ctx: Ctx, run_id: str, wait_id: str | None) -> str:
    """This ``answer`` (its value and ``--value-json`` as given; after
    ``flowdesk`` and its ``--db``/``--scope``), pinned to the question
    ``wait_id`` of flow run ``run_id``: what Ctrl-C prints until the answer
    is saved (``resume`` would find the run still waiting for it), and what
    a run asking several questions prints for each."""
    from desktop_app.cli.waits import wait_id_arg

    a = ctx.args
    command = f"answer {run_id} {shell_quote(a.value)}" + (" --value-json" if a.value_json else "")
    if wait_id is not None:
        command += f" --wait-id {shell_quote(wait_id_arg(run_id, wait_id))}"
    return command


def cmd_answer(ctx: Ctx) -> int:
    from desktop_app.cli.admin import deliver_outbox

    a = ctx.args
    # a VALUE given is checked before the database is opened (bad input costs nothing)
    if a.value != "-":
        value = _answer_value(a.value, a.value_json, "VALUE")
    # a full disk while the database opens (its -shm index cannot be made):
    # nothing answered, and the message names this answer again
    ctx.unsaved = f"the answer was not saved (run {a.run_id} still waits for it)"
    sv = ctx.services()
    ctx.unsaved = None
    ref = ctx.resolve(sv, a.run_id)
    if a.value == "-":
        value = _answer_value(read_answer(), a.value_json, "the answer on standard input")
    if ref.kind == "langgraph":
        from desktop_app.cli import langgraph

        return langgraph.answer(sv, ref.run_id, value, wait_id=a.wait_id)
    if ref.kind == "agent":
        from desktop_app.cli.ask import answer_pin, resume_agent_run

        wait_id = answer_pin(sv, ref.run_id, a.wait_id)
        return resume_agent_run(ctx, sv, ref.run_id, answer=str(value), wait_id=wait_id)
    ctx.current_run = ref.run_id
    if a.wait_id is not None:  # as show prints it (STEP:N) or as waiting --json gives it
        from desktop_app.cli.waits import full_wait_id

        a.wait_id = full_wait_id(ref.run_id, a.wait_id)
    run = sv.checkpoints.get_run(ref.run_id)
    if run.status != "waiting":  # answered already, finished, or never asked: exit 1, as cancel
        raise RunStateError(
            f"run {run.run_id} is {display_status(run, sv.checkpoints.now())}, not waiting for "
            f"an answer; nothing was answered (`{ctx.hints.cmd(f'show {run.run_id}')}` says "
            "what it did)"
        )
    _refuse_moved(sv, [run.run_id], None)  # before what it waits for: nothing offered here
    _refuse_other_waits(ctx, sv, run)
    from desktop_app.cli.runs import refuse_unregistered

    refuse_unregistered(ctx, sv, run.run_id, "answered")
    wait_id = a.wait_id if a.wait_id is not None else _one_question(ctx, sv, run.run_id)
    ctx.unanswered = _answer_command(ctx, run.run_id, wait_id)

    def saved() -> None:
        ctx.unanswered = None

    try:
        result = sv.engine.resume_with(ref.run_id, value, wait_id=wait_id, on_saved=saved)
    except DiskFullError:
        _say_if_unsaved(ctx, sv, run)
        raise
    except CheckpointDecodeError as exc:  # its state no longer fits: refused before the answer
        if ctx.unanswered is not None:
            exc.add_note(f"nothing was answered: run {run.run_id} still waits for it")
        raise
    except RunLeasedError as exc:  # another process took it between the read and the answer
        if exc.moved_to is not None:
            raise
        raise RunStateError(_answer_lost(ctx, sv, run.run_id, exc.owner)) from exc
    except RunStateError as exc:  # the deadline passed first: as `resume` would say
        if sv.checkpoints.get_run(ref.run_id).status == "timed_out":
            for line in timed_out_hints(ctx, ref.run_id):
                exc.add_note(line)
        raise
    try:
        delivered = deliver_outbox(sv.engine)  # side effects the answer released
    except DiskFullError:
        note_if_completed(ctx, sv, result.run_id)
        raise
    print(f"run {result.run_id} {result.status}")
    if result.status == "completed":
        say_kept(ctx, sv, result.run_id)
    if delivered:
        print(f"{plural(delivered, 'outbox intent')} delivered")
    if run.flow_name == "tidy" and result.status != "waiting":
        from desktop_app.cli.runs import ANSWER_FILES, tidy_report

        for line in tidy_report(ctx, sv.checkpoints, result.run_id, limit=ANSWER_FILES):
            print(line)
    # its error and what works on it, as `start` and `resume` say them
    return report_hints(ctx, result.run_id, result.status, result.error)


def _answer_lost(ctx: Ctx, sv: Any, run_id: str, owner: str) -> str:
    """What ``answer`` says when another live process (``owner``) took run
    ``run_id`` between this command's read and its answer (two answers at
    once: the other one's): this answer was not recorded; the other one
    stands once it is in (the run no longer waits for an answer)."""
    show = ctx.hints.cmd(f"show {run_id}")
    said = (
        f"run {run_id} was taken a moment ago by another process ({owner}), which goes on "
        "with it: your answer was not recorded, nothing was answered here"
    )
    cp = sv.checkpoints.latest(run_id)
    if cp.status != "waiting" or not any(w.kind == "input" for w in cp.waits):
        return (
            f"{said}; its question was answered there, and that first answer stands "
            f"(`{show}` says what it did)"
        )
    return f"{said}; `{show}` says whether it still waits for an answer once that process is done"


def _refuse_other_waits(ctx: Ctx, sv: Any, run: Any) -> None:
    """Refuse an ``answer`` to the waiting run ``run`` when it waits for a
    signal, an event or a timer and asks no question: say what it waits for
    and the command that reaches it, as ``show`` prints them.

    Raises:
        RunStateError: no question is pending (exit 1); nothing was answered.
    """
    from desktop_app.cli.waits import wait_lines

    cp = sv.checkpoints.latest(run.run_id)
    if ctx.args.wait_id in cp.meta.get("resolved", []):
        return  # answered already: the engine says so, and that the first answer stands
    waits = cp.waits
    if not waits or any(w.kind == "input" for w in waits):
        return
    lines = "\n".join(wait_lines(ctx.hints, run, waits, sv.checkpoints.now()))
    raise RunStateError(
        f"run {run.run_id} asks no question, so nothing was answered; it waits for:\n{lines}"
    )


def note_if_completed(ctx: Ctx, sv: Any, run_id: str) -> None:
    """After a full disk stopped the delivery of run ``run_id``'s side
    effects: when the run completed, :attr:`Ctx.queued` says how many are
    left, queued or whose sending began (as ``show`` counts them), for a
    message that does not call the run interrupted. A read that fails too
    leaves the message as it is."""
    try:
        run = sv.checkpoints.get_run(run_id)
        unsent = sv.checkpoints.open_intents(run_id)
    except FlowdeskError:
        return
    if run.status != "completed" or not unsent:
        return
    sending = sum(i.status == "sending" for i in unsent)
    left = len(unsent) - sending
    one, many = INTENT_NOUNS.get(run.flow_name, ("side effect", "side effects"))
    said = [f"{plural(left, one, many)} {'is' if left == 1 else 'are'} queued"] if left else []
    if sending:  # its send began and its end was not recorded, as `show` says
        said.append(unsettled_text(run.flow_name, sending))
    ctx.queued = " and ".join(said)


def _say_if_unsaved(ctx: Ctx, sv: Any, before: Any) -> None:
    """After a full disk stopped an answer: when the run's revision is still
    ``before``'s, the answer was not saved (the run still waits for it), and
    :attr:`Ctx.unsaved` says so for the message, which then names the same
    ``answer`` command; else the answer was saved and the run stopped after
    it (the message names ``resume``). A read that fails too leaves the
    message as it is."""
    try:
        now = sv.checkpoints.get_run(before.run_id)
    except FlowdeskError:
        return
    if now.revision == before.revision:
        ctx.unsaved = f"the answer was not saved (run {before.run_id} still waits for it)"
        ctx.current_run = None


def _one_question(ctx: Ctx, sv: Any, run_id: str) -> str | None:
    """The wait id of the one question run ``run_id`` asks now (``None``:
    none), which an ``answer`` without ``--wait-id`` answers: pinned, so
    that an answer racing another one is refused once the run has moved on
    to its next question instead of answering that one (two answers at once
    put the loser's "no" into the next question's field). Refuses a run
    asking several questions at once, printing the command for each, with
    the user's answer (and ``--value-json``, ``--db``, ``--scope``) as given.

    Raises:
        InputError: more than one question is pending (exit 2); nothing
            was answered.
    """
    asked = [w for w in sv.checkpoints.latest(run_id).waits if w.kind == "input"]
    if len(asked) < 2:
        return asked[0].wait_id if asked else None
    each = "\n".join(
        f"  {json.dumps(w.prompt, ensure_ascii=False)}: "
        f"{ctx.hints.cmd(_answer_command(ctx, run_id, w.wait_id))}"
        for w in asked
    )
    raise InputError(
        f"run {run_id} asks {len(asked)} questions at once; say which one this answer is "
        f"for with --wait-id (nothing was answered):\n{each}"
    )


def _answer_value(text: str, as_json: bool, what: str) -> Any:
    """The answer: ``text``, or ``text`` parsed as JSON with ``--value-json``."""
    return parse_json(text, f"--value-json was given but {what}") if as_json else text


def cmd_signal(ctx: Ctx) -> int:
    """``flowdesk signal NAME KEY [--payload JSON] [--dedupe-key K]``: store
    a signal and deliver it now to a run waiting for it, if this process can
    run one (:meth:`desktop_app.flow.Engine.signal`). One signal is taken by
    one wait (a durable mailbox, as a Temporal signal goes to one workflow
    execution): it says which run took it and which runs still wait, with
    the command that sends one for them. A payload a waiting run cannot
    take is refused before it is stored (``SignalPayloadError``, exit 2)."""
    a = ctx.args
    _refuse_empty(ctx, a.name, "signal name")
    a.key = _signal_key(a)
    payload = json_option(a.payload, a.payload_file, "--payload", "null")
    sv = ctx.services()
    if a.dedupe_key is not None and (first := sv.checkpoints.signal_by_dedupe_key(a.dedupe_key)):
        return _say_duplicate(ctx, sv, first, payload)
    waiting = sv.checkpoints.runs_waiting_for("signal", a.name, a.key)
    _refuse_moved(sv, waiting, "signal")
    before = signal_waits(sv.checkpoints, a.name, a.key)
    signal_id = sv.engine.signal(a.name, a.key, payload, dedupe_key=a.dedupe_key)
    if not signal_id.stored:  # a send of its dedupe key stored it first, at the same instant
        first = sv.checkpoints.signal_by_dedupe_key(a.dedupe_key)
        return _say_duplicate(ctx, sv, first, payload)
    print(f"signal {signal_id} stored")
    reach = signal_reach(sv.checkpoints, signal_id, a.name, a.key, before)
    what = f"signal {quoted(a.name)} with key {quoted(a.key)}"
    if reach.taken_by is not None and reach.refused is not None:
        print(
            f"run {reach.taken_by} refused it and still waits for {what}: {reach.refused} "
            f"(send one that fits: {_signal_again(ctx, payload)})",
            file=sys.stderr,
        )
        return EXIT_FAILED
    code = EXIT_OK
    if reach.taken_by is not None:
        try:
            took = sv.checkpoints.get_run(reach.taken_by)
        except CheckpointNotFoundError:  # it completed, and its flow deletes such runs
            print(
                f"delivered to run {reach.taken_by} (now completed, and deleted: its flow "
                "deletes the runs that complete)"
            )
        else:
            print(f"delivered to run {reach.taken_by} (now {took.status})")
            if took.status == "completed":
                _say_kept(ctx, sv, took)
            if took.status != "waiting":  # it went on here: its error and what works on it
                code = report_hints(ctx, took.run_id, took.status, took.error)
    if reach.taken_by is None:
        gone = [r for r in waiting if r not in reach.still_waiting and r not in reach.damaged]
        _say_ended(ctx, sv, gone)
    for run_id in reach.damaged:  # in the waits table, but its checkpoint cannot be read
        print(
            f"run {run_id} waits for it too, but its checkpoint is damaged, so it cannot take "
            f"it: `{ctx.hints.cmd(f'show {run_id}')}` says what works on it",
            file=sys.stderr,
        )
    if reach.still_waiting and reach.taken_by is not None:
        n = len(reach.still_waiting)
        print(
            f"{plural(n, 'other run')} still {'waits' if n == 1 else 'wait'} for {what}: "
            f"{', '.join(reach.still_waiting)}; a signal is taken by one wait, so send one "
            f"for each: {_signal_again(ctx, payload)}"
        )
    elif reach.still_waiting:
        n = len(reach.still_waiting)
        print(
            f"kept in the mailbox: {plural(n, 'run')} {'waits' if n == 1 else 'wait'} for it "
            f"({', '.join(reach.still_waiting)}) and none took it here now; the first one "
            "woken by a process that runs its flow takes it (flowdesk agent, the app, or "
            f"resume RUN; what they wait for: {ctx.hints.cmd('waiting')})"
        )
        _say_version_stuck(ctx, sv, reach.still_waiting)
    elif reach.taken_by is None and not reach.damaged:
        # a misspelt name or key is stored too: say so, and where to look
        _say_reached(ctx, [], no_signal_waiter(a.name, a.key))
    return code


def say_kept(ctx: Ctx, sv: Any, run_id: str) -> None:
    """:func:`_say_kept` for the completed run ``run_id`` (nothing when it
    was deleted as it completed)."""
    try:
        run = sv.checkpoints.get_run(run_id)
    except CheckpointNotFoundError:
        return
    _say_kept(ctx, sv, run)


def _say_kept(ctx: Ctx, sv: Any, run: Any) -> None:
    """A completed run whose flow deletes the runs that complete is kept
    while side effects it queued are not delivered (``flow.outbox``'s
    ``delete_when_sent``): say so, and who delivers them."""
    from desktop_app.cli.runs import delivery_lines

    flow = sv.engine.flows.get(run.flow_name)
    if flow is None or not flow.delete_on_success:
        return
    unsent = [i for i in sv.checkpoints.open_intents(run.run_id) if i.moved_to is None]
    if not unsent:
        return
    print(
        f"its flow deletes the runs that complete: run {run.run_id} is kept until its side "
        f"effects are delivered ({queued_text(run.flow_name, len(unsent))}), then deleted "
        "by the next pass of a process that runs its flow (flowdesk agent, the app)"
    )
    for line in delivery_lines(ctx, run, unsent):
        print(line)


def _signal_key(a: Any) -> str:
    """The signal's key: ``KEY``, or ``--key-file``'s text without one
    final newline (a key too long for a command line goes by file).

    Raises:
        InputError: neither or both are given, both files are standard
            input, or the file cannot be read (exit 2).
    """
    if a.key_file is None:
        if a.key is None:
            raise InputError("give the signal's KEY after its name, or --key-file PATH")
        return str(a.key)
    if a.key is not None:
        raise InputError("give the signal's KEY or --key-file, not both")
    if a.key_file == "-" and a.payload_file == "-":
        raise InputError("--key-file and --payload-file cannot both read standard input")
    return read_text_option(a.key_file, "--key-file").removesuffix("\n")


def _refuse_empty(ctx: Ctx, name: str, what: str) -> None:
    """Refuse an empty signal name or event type (``what``) before anything
    is opened: no wait step has one, so it would reach nothing.

    Raises:
        InputError: ``name`` is empty (exit 2); nothing was sent.
    """
    if not name:
        raise InputError(
            f"the {what} is empty, and no wait waits on an empty one: nothing was sent; "
            f"give the name the flow's wait step uses (what runs wait for: "
            f"{ctx.hints.cmd('waiting')})"
        )


def _say_duplicate(ctx: Ctx, sv: Any, first: Any, payload: Any) -> int:
    """A ``signal`` whose ``--dedupe-key`` was used already (``first``, the
    :class:`~desktop_app.store.records.Signal` sent with it): the same
    name, key and payload is a duplicate, which stores nothing; say which
    signal it was and what became of it (exit 0).

    Raises:
        DedupeKeyReusedError: the key was used for another name, key or
            payload; nothing was sent (exit 2).
    """
    from desktop_app.store import codec
    from desktop_app.store.rows import same_signal_or_refuse

    a = ctx.args
    same_signal_or_refuse(first, a.dedupe_key, a.name, a.key, codec.dumps(payload))
    what = f"signal {quoted(a.name)} with key {quoted(a.key)}"
    print(
        f"duplicate: dedupe key {quoted(a.dedupe_key)} was used already for {what} and this same "
        f"payload (signal {first.signal_id}); nothing new was stored"
    )
    reach = signal_reach(sv.checkpoints, first.signal_id, a.name, a.key, {})
    if reach.taken_by is not None and reach.refused is not None:
        print(f"run {reach.taken_by} refused it: {reach.refused}")
    elif reach.taken_by is not None:
        status = sv.checkpoints.get_run(reach.taken_by).status
        print(f"it was delivered to run {reach.taken_by} (now {status})")
    elif reach.still_waiting:
        n = len(reach.still_waiting)
        print(
            f"it is kept in the mailbox: {plural(n, 'run')} {'waits' if n == 1 else 'wait'} "
            f"for it ({', '.join(reach.still_waiting)}); the first one woken by a process "
            "that runs its flow takes it"
        )
    else:
        print(no_signal_waiter(a.name, a.key))
    return EXIT_OK


def _signal_again(ctx: Ctx, payload: Any) -> str:
    """The ``signal`` command as the user gave it, without ``--dedupe-key``
    (a second send with it would store nothing); a key or payload too long
    to paste (:func:`~desktop_app.cli.common.pasteable`) goes by its file
    (the one given, else a placeholder the hint explains)."""
    a = ctx.args
    key, key_note = value_arg(a.key, "key", a.key_file)
    rest = f"signal {shell_quote(a.name)} {key}"
    notes = [key_note]
    if payload is not None or a.payload_file is not None:
        text = a.payload if a.payload is not None else json.dumps(payload, ensure_ascii=False)
        arg, note = value_arg(text, "payload", a.payload_file)
        rest += f" {arg}" if arg.startswith("--") else f" --payload {arg}"
        notes.append(note)
    said = " and ".join(n for n in notes if n)
    return ctx.hints.cmd(rest) + (f", {said}" if said else "")


def _say_ended(ctx: Ctx, sv: Any, others: list[str]) -> list[str]:
    """Runs that waited for a signal (or an event) no wait took and that
    failed, timed out (its wait's deadline had passed) or were canceled
    meanwhile (a route after the wait failed on it: the step failed, the
    signal stays in the mailbox): say so on stderr, with the command that
    shows why; returns the runs named. A run that completed took another
    signal sent at the same time, and is not named."""
    named = []
    for run_id in others:
        run = sv.checkpoints.get_run(run_id)
        if run.status not in ("failed", "timed_out", "canceled"):
            continue
        named.append(run_id)
        print(
            f"run {run_id} is {run.status} now: {run.error or 'no error recorded'} "
            f"({ctx.hints.cmd(f'show {run_id}')})",
            file=sys.stderr,
        )
    return named


def cmd_publish(ctx: Ctx) -> int:
    """``flowdesk publish TYPE [--payload JSON]``: an event for every run
    waiting on ``TYPE`` (:meth:`desktop_app.flow.Engine.publish`; a broadcast,
    never consumed); runs this process may run are woken now, others when
    their process looks. A payload that a run waiting for ``TYPE`` now
    cannot take is refused before it is stored (``EventPayloadError``, exit
    2, naming every such run), even when other waiting runs could take it."""
    _refuse_empty(ctx, ctx.args.type, "event type")
    payload = json_option(ctx.args.payload, ctx.args.payload_file, "--payload", "null")
    sv = ctx.services()
    waiting = sv.checkpoints.runs_waiting_for("event", ctx.args.type)
    _refuse_moved(sv, waiting, "event")
    event_id = sv.engine.publish(ctx.args.type, payload)
    print(f"event {event_id} published")
    ended = _say_ended(ctx, sv, waiting)  # woken past its deadline: timed out, not reached
    if ended and len(ended) == len(waiting):
        return EXIT_OK
    _say_reached(
        ctx,
        [r for r in waiting if r not in ended],
        f"no run waits for event {ctx.args.type!r} now, and a run that waits for it later "
        "takes only one published after its wait began",
    )
    return EXIT_OK


def _refuse_moved(sv: Any, waiting: list[str], what: str | None) -> None:
    """Raise :class:`~desktop_app.errors.RunLeasedError` (noting that the
    ``what``, a signal or an event, was not stored; ``None``: an answer,
    which the error's "see it there" says enough of) when a run of
    ``waiting`` was moved to PostgreSQL by ``db copy``: stored here it
    would reach nothing, since the run goes on there."""
    from desktop_app.errors import moved_to

    for run_id in waiting:
        run = sv.checkpoints.get_run(run_id)
        where = moved_to(run.lease_owner)
        if where is not None and run.status not in ENDED_RUN_STATUSES:
            exc = RunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
            if what is not None:
                exc.add_note(
                    f"the {what} was not stored here: the run waits for it at {where}; "
                    f"send it there with --db {where}"
                )
            raise exc


def _say_version_stuck(ctx: Ctx, sv: Any, run_ids: Sequence[str]) -> None:
    """For each run of ``run_ids`` no process with this code can wake (its
    flow changed since it started): that it cannot take the signal until
    then, and the ``show`` that says what works on it (a tryout: the
    mailbox line promised a `resume` that refuses such a run)."""
    from desktop_app.cli.runs import stuck_on_version

    for run_id in run_ids:
        try:
            run = sv.checkpoints.get_run(run_id)
        except FlowdeskError:  # gone meanwhile: the line above said enough
            continue
        if stuck_on_version(sv, run) is not None:
            print(
                f"run {run_id} cannot take it while its flow's code is not the one it started "
                f"with: `{ctx.hints.cmd(f'show {run_id}')}` says what works on it",
                file=sys.stderr,
            )


def _say_reached(ctx: Ctx, waiting: list[str], nobody: str) -> None:
    """After a signal or an event: the runs that waited for it (stdout), or,
    when none did, ``nobody`` with the command that lists what runs wait
    for (stderr)."""
    if waiting:
        print(f"for {plural(len(waiting), 'waiting run')}: {', '.join(waiting)}")
    else:
        print(f"{nobody} (what runs wait for: {ctx.hints.cmd('waiting')})", file=sys.stderr)
