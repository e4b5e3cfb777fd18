"""What a waiting run waits for, in words, with the command that moves it on.

``flowdesk show RUN`` prints these lines (:func:`wait_lines`): for each
pending wait its kind and what it needs (the question, the signal's name
and key, the event type, the timer), its deadline in local time and in UTC
with the time left, and the exact command to run, carrying the user's
``--db``/``--scope`` (:class:`~desktop_app.cli.output.Hints`):

* input: ``answer RUN yes --wait-id STEP:N``: the word after ``RUN`` is
  the answer, as its field's type takes it (:func:`answer_type`), and
  ``--wait-id`` the question it answers (:func:`wait_id_arg`): an answer
  typed after someone else answered is refused instead of answering the
  run's next question;
  once its deadline has passed, no answer is taken: ``resume RUN`` times
  the run out, as the next wake-up would;
* signal: ``signal NAME KEY`` (a payload with ``--payload JSON``);
* event: ``publish TYPE`` (a payload with ``--payload JSON``);
* timer: ``resume RUN`` fires it once it is due (so does ``flowdesk agent``
  or the app, on their own).

A run ``waiting`` with no wait was paused for an operator (a full disk, an
unknown commit outcome): ``resume RUN`` continues it. An agent run asking
its user (``input_required``) gets ``ask --resume RUN --answer TEXT`` (as
``flowdesk waiting`` prints it); one waiting for
approval of a tool call shows the exact call with its yes and no commands
(:func:`agent_wait_lines`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from desktop_app.cli.common import value_arg
from desktop_app.cli.output import MOVED_WAIT, Hints, due_in, iso
from desktop_app.flows import LIVE_STATUSES
from desktop_app.textsafe import quoted, shell_quote, visible_controls, visible_json
from desktop_app.words import local_and_utc as moment_both_ways


def local_and_utc(ts: float, now: float) -> str:
    """``2026-12-04 17:25:43 IST (local), 2026-12-04T11:55:43.120Z (UTC), in 23h 59m``:
    UTC epoch seconds in the machine's time zone (``TZ``), in UTC, and
    relative to ``now``."""
    return f"{moment_both_ways(ts)}, {due_in(ts, now)}"


def _question(prompt: Any) -> str:
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
    return visible_json(text)


def _await_field(flow: Any, step_id: str) -> Any:
    """The pydantic ``FieldInfo`` of the state field an await step of
    ``flow`` (a ``CompiledFlow``) fills, or ``None`` when ``step_id`` is no
    await step or the field is not found."""
    from desktop_app.flow.definition import AwaitStep

    step = flow.steps.get(step_id)
    if not isinstance(step, AwaitStep):
        return None
    return flow.state_type.model_fields.get(step.into)


def answer_choices(flow: Any, step_id: str) -> list[str] | None:
    """The answers an await step of ``flow`` (a ``CompiledFlow``) takes when
    its state field is a ``Literal`` (``Literal["yes", "no"]``, also inside
    ``Optional``/``Annotated``): the engine refuses any other. ``None`` when
    the step is not an await step or its field takes other values."""
    import types
    from typing import Annotated, Literal, Union, get_args, get_origin

    field = _await_field(flow, step_id)
    if field is None:
        return None
    found: list[str] = []

    def walk(tp: Any) -> bool:
        origin = get_origin(tp)
        if tp is type(None):
            return True
        if origin is Literal:
            found.extend(str(a) for a in get_args(tp))
            return True
        if origin is Annotated:
            return walk(get_args(tp)[0])
        if origin in (Union, types.UnionType):
            return all(walk(a) for a in get_args(tp))
        return False

    return found if walk(field.annotation) and found else None


def answer_type(flow: Any, step_id: str) -> str | None:
    """What an await step of ``flow`` (a ``CompiledFlow``) takes, judged by
    the type of its state field (``Optional``/``Annotated`` unwrapped):
    ``"bool"`` (yes or no), ``"str"`` (any text), or the type's name for
    any other (an ``int``, a model: JSON with ``--value-json``). ``None``
    when the step is not an await step (a ``ctx.interrupt`` takes any JSON
    data) or the field is not found."""
    import types
    from typing import Annotated, Union, get_args, get_origin

    field = _await_field(flow, step_id)
    if field is None:
        return None
    tp: Any = field.annotation
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            kept = [a for a in get_args(tp) if a is not type(None)]
            if len(kept) != 1:
                break
            tp = kept[0]
        else:
            break
    if tp is bool:
        return "bool"
    if tp is str:
        return "str"
    return getattr(tp, "__name__", None) or str(tp)


def _answer_note(taken: str | None, only: Sequence[str] | None, registered: bool = True) -> str:
    """What the answer command's answer (the word after the run id) may be:
    ``taken`` is the field's type (:func:`answer_type`), ``only`` the
    choices; ``registered``: the run's flow is registered here (else what it
    takes is not known here, and no answer is taken here before it is)."""
    where = "the word after the run id"
    if not registered and not only:
        return (
            f"{where} is the answer: which answers it takes is known where its flow is "
            "registered (see above)"
        )
    if only:
        return f"{where} is the answer: {' or '.join(only)} (nothing else is taken)"
    if taken == "bool":
        return f"{where} is the answer: yes or no (nothing else is taken)"
    if taken == "str":
        return f"{where} is the answer: any text"
    if taken is not None:
        return f"{where} is the answer: JSON that fits its type ({taken}), with --value-json"
    return f"{where} is the answer: yes, no or any text (JSON with --value-json)"


def signal_type(flow: Any, step_id: str) -> str | None:
    """The payload type a signal or event wait step of ``flow`` (a
    ``CompiledFlow``) takes, as its ``into`` field declares it (``dict[str, Any] | None``), or
    ``None`` when ``step_id`` is no such step or keeps no payload."""
    from desktop_app.flow.definition import WaitStep
    from desktop_app.flow.waiting import expected_type

    step = flow.steps.get(step_id)
    if not isinstance(step, WaitStep) or step.into is None:
        return None
    return expected_type(flow, step)


def refused_lines(cp: Any) -> list[str]:
    """The lines ``show`` prints for the signals and events the run's waits
    refused (``meta["refused_signals"]`` and ``meta["refused_events"]`` of
    checkpoint ``cp``: the payload did not fit; the run went on waiting),
    oldest first; none when none."""
    lines: list[str] = []
    for noun in ("signal", "event"):
        refused = cp.meta.get(f"refused_{noun}s") or []
        if refused:
            lines.append(f"refused {noun}s (their payload did not fit; the run went on waiting):")
        for r in refused:
            lines.append(f"  {noun} {r[noun]} (wait {r['wait']}): {visible_controls(r['reason'])}")
    return lines


def wait_lines(
    hints: Hints,
    run: Any,
    waits: Sequence[Any],
    now: float,
    choices: Mapping[str, Sequence[str]] | None = None,
    *,
    stuck: bool = False,
    moved: bool = False,
    taken: Mapping[str, str] | None = None,
    registered: bool = True,
    app_fires: bool = True,
) -> list[str]:
    """The lines ``show`` prints under ``waits for:`` for the flow run
    ``run`` (a ``RunRecord``) and its pending ``waits`` (``Wait`` records),
    judged at ``now`` (UTC epoch seconds). ``choices`` maps a wait id to the
    only answers its step takes (:func:`answer_choices`); other questions
    take what ``taken`` says for their wait id (:func:`answer_type`: yes or
    no for a bool field, any text for a str, JSON for another type), or any
    text or JSON. Each command line is ``<what> with: <command>``, the
    command runnable exactly as printed. ``stuck``: the run's flow changed
    since it started (``show`` says so above): no wait fires or is answered,
    and no command is offered for one. ``moved``: ``db copy`` moved the run
    (``show`` says where above): its waits are answered there, and no
    command on this database is offered. ``registered``: the run's flow is
    registered in this process; when not (``show`` says how to register it
    above), a timer is fired only by a process that registers it.
    ``app_fires``: the app fires due timers on this database
    (:func:`~desktop_app.bootstrap.executes_runs`: always on SQLite; on
    PostgreSQL only with the ``worker`` setting, else only workers do)."""
    rid = run.run_id
    lines: list[str] = []
    if not waits:
        if run.status == "waiting":
            why = f": {visible_controls(run.error)}" if run.error else ""
            lines.append(f"  an operator{why}")
            if moved:
                lines.append(MOVED_WAIT)
            elif not stuck:
                lines.append(f"    continue with: {hints.cmd(f'resume {rid}')}")
        return lines
    for w in waits:
        step = f"step {w.step_id}, wait {w.wait_id}"
        if w.kind == "input":
            lines.append(f"  an answer ({step}): {_question(w.prompt)}")
        elif w.kind == "signal":
            lines.append(f"  signal {quoted(str(w.name))} with key {quoted(str(w.key))} ({step})")
        elif w.kind == "event":
            lines.append(f"  an event of type {str(w.name)!r} ({step})")
        else:
            lines.append(f"  a timer ({step})")
        if w.deadline_at is not None:
            label = "fires" if w.kind == "timer" else "deadline"
            lines.append(f"    {label} {local_and_utc(w.deadline_at, now)}")
            if after_run_deadline(run, w):
                lines.append("    after the run's own deadline (above): the run times out first")
        if moved:
            lines.append(MOVED_WAIT)
            continue
        if stuck:
            lines.append("    nothing moves the run past it while it is stuck (see above)")
            continue
        if run_deadline_passed(run, now):  # the run times out: nothing is taken
            lines.append(PAST_RUN_DEADLINE)
            continue
        if too_late(w, now):  # `answer` is refused; a signal or event sent now counts not
            lines.extend(too_late_lines(hints, rid, w, now))
            continue
        note, verb = _SAY[w.kind]
        if w.kind == "timer":
            agent = None if app_fires else hints.cmd("agent")
            note = timer_note(
                run.flow_name, registered=registered, app_fires=app_fires, agent=agent
            )
        if w.kind == "input":
            only = (choices or {}).get(w.wait_id)
            note = _answer_note((taken or {}).get(w.wait_id), only, registered)
        elif w.kind in ("signal", "event") and (expected := (taken or {}).get(w.wait_id)):
            note = f"{note}, of type {expected} (another is refused)"
        lines.append(f"    {note}")
        command = wait_command(hints, rid, w, choices=(choices or {}).get(w.wait_id))
        if w.kind == "signal" and (holder := value_arg(str(w.key), "key")[1]):
            how = hints.cmd(f"show {rid} -o json")
            command += f", {holder}: `{how}` gives it (waits, key)"
        lines.append(f"    {verb} with: {command}")
    return lines


def timer_note(
    flow_name: str, *, registered: bool, app_fires: bool, agent: str | None = None
) -> str:
    """Who fires a due timer of a run of ``flow_name`` on its own: a running
    ``flowdesk agent``, and the app only where it executes runs (a SQLite
    file, or PostgreSQL with ``worker = true``: ``app_fires``); only one
    that registers the flow when this process does not (``registered``).
    ``agent``: the worker command for the run's database and scope, named
    on PostgreSQL (a worker serves one scope: one started for another
    fires nothing of this run, a team tryout's case)."""
    if not app_fires:
        who = "a running `flowdesk agent` (a worker)"
        if agent is not None:
            who = f"a running worker of this run's scope (`{agent}`)"
        if not registered:
            who = f"only a `flowdesk agent` that registers flow {flow_name!r}"
        return (
            f"{who} fires it on its own; the app does not on PostgreSQL unless its "
            "`worker` setting is on (`FLOWDESK_WORKER=1`)" + ("" if registered else " (see above)")
        )
    if not registered:
        return (
            f"only a `flowdesk agent` or an app that registers flow {flow_name!r} "
            "fires it on its own (see above)"
        )
    return "a running `flowdesk agent` or the app fires it on its own"


#: wait kind -> (what to know, what the command does); a timer's note: :func:`timer_note`
_SAY = {
    "input": ("", "answer"),  # the note: :func:`_answer_note`
    "signal": ("a payload goes with --payload JSON", "send it"),
    "event": ("a payload goes with --payload JSON", "publish it"),
    "timer": ("", "fire it once due"),
}


#: what happens to a question whose deadline passed
TOO_LATE = (
    "its deadline passed, so the next wake-up (`flowdesk resume`, a running "
    "`flowdesk agent` or the app) times the run out"
)
#: what happens to a signal or event wait whose deadline passed
TOO_LATE_SENT = (
    "its deadline passed, so one sent now does not complete the wait; the next wake-up "
    "(`flowdesk resume`, a running `flowdesk agent` or the app) completes it with one "
    "sent in time that no process has delivered yet, else times the run out"
)


#: what happens to a live run whose own deadline (``FlowBuilder(deadline_s=...)``)
#: passed: whatever it waits for, its next wake-up ends it
RUN_TOO_LATE = (
    "its deadline passed, so the next wake-up (`flowdesk resume`, a running "
    "`flowdesk agent` or the app) times the run out, whatever it waits for"
)


def run_deadline_lines(hints: Hints, run: Any, now: float, indent: str = "") -> list[str]:
    """``show``'s and ``waiting``'s lines for the own deadline of ``run`` (a
    ``RunRecord``; ``deadline_at``, UTC epoch seconds) while it applies:
    when it falls, and that the run times out then whatever it waits for;
    once passed, that its next wake-up times it out, with the command that
    does it now (``resume RUN``). ``[]`` for a run with no deadline or one
    that ended. ``indent``: put before every line."""
    deadline = run.deadline_at
    if deadline is None or run.status not in LIVE_STATUSES:
        return []
    said = f"{indent}run deadline {local_and_utc(deadline, now)}"
    if now < deadline:
        return [f"{said}: the run times out then, whatever it waits for"]
    return [
        said,
        f"{indent}  {RUN_TOO_LATE}",
        f"{indent}  time it out now with: {hints.cmd(f'resume {run.run_id}')}",
    ]


def run_deadline_passed(run: Any, now: float) -> bool:
    """Whether the own deadline of live ``run`` passed at ``now`` (UTC epoch
    seconds): no answer, signal or timer moves it on any more; its next
    wake-up times it out (:func:`run_deadline_lines` says so, with the
    command)."""
    deadline = run.deadline_at
    return deadline is not None and run.status in LIVE_STATUSES and now >= deadline


#: a wait's line once its run's own deadline passed (instead of its command)
PAST_RUN_DEADLINE = "    nothing moves it on any more: the run's own deadline passed (above)"


def after_run_deadline(run: Any, wait: Any) -> bool:
    """Whether ``wait``'s deadline (or timer) falls after the own deadline of
    ``run``: the run times out first, so the wait never fires or expires."""
    deadline = run.deadline_at
    return deadline is not None and wait.deadline_at is not None and wait.deadline_at > deadline


def too_late(wait: Any, now: float) -> bool:
    """Whether ``wait`` (a ``Wait``) is a question, signal or event wait
    whose deadline passed at ``now`` (UTC epoch seconds): an answer is
    refused then (exit 1), and a signal or event sent then does not
    complete it; ``resume RUN`` wakes the run at once."""
    return (
        wait.kind in ("input", "signal", "event")
        and wait.deadline_at is not None
        and now >= wait.deadline_at
    )


def too_late_lines(hints: Hints, run_id: str, wait: Any, now: float) -> list[str]:
    """``show``'s and ``waiting``'s lines for a wait :func:`too_late` at
    ``now``: what happens now, and the command that wakes the run."""
    if wait.kind == "input":
        return [
            f"    too late to answer: {TOO_LATE}",
            f"    time it out now with: {wait_command(hints, run_id, wait, now=now)}",
        ]
    verb = "signal" if wait.kind == "signal" else "publish"
    return [
        f"    too late to {verb}: {TOO_LATE_SENT}",
        f"    wake it now with: {wait_command(hints, run_id, wait, now=now)}",
    ]


def wait_id_arg(run_id: str, wait_id: str) -> str:
    """``--wait-id``'s value in a printed ``answer`` command for the
    question ``wait_id`` of flow run ``run_id``: the id without its
    ``RUN:`` prefix (``approve:0``), which :func:`full_wait_id` restores."""
    return wait_id.removeprefix(f"{run_id}:")


def full_wait_id(run_id: str, given: str) -> str:
    """The wait id ``answer RUN VALUE --wait-id GIVEN`` names for flow run
    ``run_id``: ``GIVEN`` as ``show`` and ``waiting --json`` give it
    (``RUN:STEP:N``) or as the printed commands do (``STEP:N``,
    :func:`wait_id_arg`)."""
    return given if given.startswith(f"{run_id}:") else f"{run_id}:{given}"


def wait_command(
    hints: Hints,
    run_id: str,
    wait: Any,
    *,
    now: float | None = None,
    choices: Sequence[str] | None = None,
) -> str:
    """The command that moves the run ``run_id`` past ``wait`` (a ``Wait``),
    as ``show`` prints it and its JSON gives it (``command``): ``answer RUN
    yes --wait-id STEP:N`` (the question it answers: refused, nothing
    answered, once the run asks another one; the first of ``choices`` in
    place of ``yes`` when the question takes only those), ``signal NAME KEY``,
    ``publish TYPE`` or ``resume RUN`` (a timer, or a question whose
    deadline passed at ``now``, UTC epoch seconds: it times the run out)."""
    if now is not None and too_late(wait, now):
        return hints.cmd(f"resume {run_id}")
    if wait.kind == "input":
        which = shell_quote(wait_id_arg(run_id, wait.wait_id))
        given = "yes" if not choices or "yes" in choices else shell_quote(choices[0])
        return hints.cmd(f"answer {run_id} {given} --wait-id {which}")
    if wait.kind == "signal":  # a key too long to paste goes by file: see wait_lines
        key, _ = value_arg(str(wait.key), "key")
        return hints.cmd(f"signal {shell_quote(str(wait.name))} {key}")
    if wait.kind == "event":
        return hints.cmd(f"publish {shell_quote(str(wait.name))}")
    return hints.cmd(f"resume {run_id}")


def agent_waits(hints: Hints, run: Any) -> list[dict[str, Any]]:
    """The pending wait of an agent run (an ``AgentRun``) as ``show -o json``
    gives it under ``waits``, like a flow run's waits: ``[]`` unless it asks
    its user (``input_required``). A tool call waiting for approval is
    ``{"kind": "approval", "wait_id", "tool", "arguments", "call",
    "commands": {"yes", "no"}}`` (``call`` is
    :func:`~desktop_app.agent.approvals.render_call`); an ``ask_user``
    question is ``{"kind": "input", "wait_id", "question", "command"}``.
    ``wait_id`` (:func:`~desktop_app.agent.approvals.agent_wait_id`) pins an
    answer to this question: ``flowdesk answer RUN yes --wait-id ID`` is
    refused once the run waits on another. Every command carries the user's
    ``--db``/``--scope``."""
    from desktop_app.agent.approvals import (
        agent_wait_id,
        answer_commands,
        ask_command,
        pending_approval,
        render_call,
    )

    if run.status != "input_required":
        return []
    expires = iso(run.expires_at)
    request = pending_approval(run.pending_call)
    if request is not None:
        yes, no = answer_commands(run.run_id, request.key)
        return [
            {
                "kind": "approval",
                "wait_id": agent_wait_id(run.pending_call),
                "tool": request.tool,
                "arguments": dict(request.arguments),
                "call": render_call(request.tool, request.arguments),
                "deadline_at": expires,
                "commands": {"yes": hints.cmd(yes), "no": hints.cmd(no)},
            }
        ]
    question = ((run.pending_call or {}).get("arguments") or {}).get("question")
    return [
        {
            "kind": "input",
            "wait_id": agent_wait_id(run.pending_call),
            "question": question,
            "deadline_at": expires,
            "command": hints.cmd(ask_command(run.run_id, agent_wait_id(run.pending_call))),
        }
    ]


def agent_wait_lines(
    hints: Hints, run: Any, now: float, first: str | None = None, *, moved: bool = False
) -> list[str]:
    """``show``'s ``waits for:`` lines of an agent run (an ``AgentRun``)
    while it asks its user (``input_required``), nothing otherwise: a tool
    call waiting for approval is shown exactly (tool and arguments, control
    characters visible) with the yes and the no command, as ``waiting``
    prints them; an ``ask_user`` question with ``ask --resume RUN --answer
    TEXT``, as ``waiting`` prints it (the answer is any text). The run's expiry when it has one.
    ``first``: what must be done before the commands work here (an
    unregistered Pydantic AI agent), printed before them. ``moved``: ``db
    copy`` moved the run (``show`` says where above): no command on this
    database is offered."""
    waits = agent_waits(hints, run)
    if not waits:
        return []
    wait = waits[0]
    if wait["kind"] == "approval":
        lines = [f"  approval of the call: {wait['call']}"]
    else:
        lines = [f"  an answer: {_question(wait['question'])}"]
    if run.expires_at is not None:
        lines.append(f"    expires {local_and_utc(run.expires_at, now)}")
    if moved:
        return [*lines, MOVED_WAIT]
    if first is not None:
        lines.append(f"    first: {first}; then")
    if wait["kind"] == "approval":
        lines.append("    the answer is yes (run the call) or no (refuse it)")
        lines.append(f"    yes: {wait['commands']['yes']}")
        lines.append(f"    no:  {wait['commands']['no']}")
    else:
        lines.append("    the answer is any text, in place of TEXT")
        lines.append(f"    answer with: {wait['command']}")
    return lines


def agent_next(hints: Hints, run: Any, *, no_stream: bool = False) -> str | None:
    """What to run next for agent run ``run`` (an ``AgentRun``) that stopped
    ``failed`` or ``rate_limited``, as ``ask``, ``show`` and ``waiting``
    print it (one source, with the user's ``--db``/``--scope``), or ``None``
    for any other status.

    Args:
        no_stream: the run was asked without streaming (``--no-stream``):
            the command asks without streaming again.

    Returns:
        For a ``rate_limited`` run with a retry time: ``it can go on from
        WHEN: a running `flowdesk agent` resumes it then, or run `RESUME`
        after that; to stop it instead: `CANCEL``` (``WHEN`` local and UTC).
        For a run that used its ``max_turns``: that command with the limit
        raised to twice the turns taken (``FLOWDESK_AGENTS__ASK__MAX_TURNS=40
        flowdesk … resume RUN``; for an agent name no variable can spell, the
        settings file's ``[agents.NAME] max_turns``).
        Otherwise the command that tries again: ``resume RUN``, or ``ask
        --resume RUN --no-stream`` after a provider that cannot stream tool
        calls (or with ``no_stream``).
    """
    if run.status not in ("failed", "rate_limited"):
        return None
    no_stream = no_stream or run.error_type == "ToolCallStreamingError"
    again = hints.cmd(
        f"ask --resume {run.run_id} --no-stream" if no_stream else f"resume {run.run_id}"
    )
    if run.error_type == "MaxTurns":
        from desktop_app.config import MAX_TURNS_CAP, max_turns_variable

        if run.turns >= MAX_TURNS_CAP:  # no limit takes it further: it is final
            return f"{MAX_TURNS_CAP:,} turns is the most a run may take: ask again, more narrowly"
        more = min(max(2 * run.turns, run.turns + 1), MAX_TURNS_CAP)
        variable = max_turns_variable(run.agent)
        if variable is not None:
            return f"{variable}={more} {again}"
        name = visible_controls(run.agent)
        return f"set max_turns = {more} under [agents.{name}] in the settings file, then `{again}`"
    if run.status != "rate_limited" or run.retry_at is None:
        return again
    when = moment_both_ways(run.retry_at)
    cancel = hints.cmd(f"cancel {run.run_id}")
    return (
        f"it can go on from {when}: a running `flowdesk agent` resumes it then, or run "
        f"`{again}` after that; to stop it instead: `{cancel}`"
    )
