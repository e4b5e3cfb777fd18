"""LangGraph threads in the CLI: their ``runs`` rows, ``show``, ``waiting``
and ``answer``. Reads the saver's tables through
:mod:`desktop_app.integrations.langgraph.threads` (no LangGraph import);
only the state of a checkpoint (``show``) needs the ``langgraph`` extra."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from desktop_app.cli.common import Ctx
from desktop_app.cli.output import EXIT_OK, emit_one, iso, moved_hint, when
from desktop_app.errors import InputError, moved_to
from desktop_app.integrations.langgraph import threads
from desktop_app.runs_view import INTERRUPTED, MOVED, display_status
from desktop_app.textsafe import one_line, shell_quote, visible_controls

if TYPE_CHECKING:
    from desktop_app.bootstrap import Services


def thread_row(t: threads.Thread, now: float) -> dict[str, Any]:
    """A LangGraph thread as a ``runs`` row (``status`` as shown: ``interrupted``
    when the process of this host that ran it is gone)."""
    return {
        "kind": threads.KIND,
        "run_id": t.thread_id,
        "flow": "graph",
        "status": display_status(t, now),
        "stored_status": t.status,
        "progress": None,
        "created_at": iso(t.created_at),
        "updated_at": iso(t.updated_at),
        "error": None,
        "lease_owner": t.owner,
        "context": t.context,
        "interrupts": t.interrupts,
    }


def thread_rows(sv: Services, args: Any, now: float) -> list[tuple[float, dict[str, Any]]]:
    """``(created_at, row)`` of the threads ``flowdesk runs`` lists under its filters."""
    wanted = set(args.status or [])
    out = []
    for t in threads.list_threads(sv.checkpoints, sv.settings.scope):
        row = thread_row(t, now)
        # by its stored status too, unless moved: a moved thread is only "moved"
        said = {row["status"]} if row["status"] == MOVED else {row["status"], t.status}
        if wanted and not (said & wanted):
            continue
        if args.tenant is not None and t.context.get("tenant_id") != args.tenant:
            continue
        if args.session is not None and t.context.get("session_id") != args.session:
            continue
        out.append((t.created_at, row))
    return out


def answer_hint(ctx: Ctx, thread_id: str, wait_id: str | None) -> str:
    """The command that answers a waiting thread (the answer on standard
    input), the thread id quoted for a POSIX shell (its program names it),
    with ``--wait-id`` and the question it asks (:attr:`threads.Thread.wait_id`):
    run late, or twice, it is refused rather than answering the thread's
    next question."""
    pin = f" --wait-id {shell_quote(wait_id)}" if wait_id else ""
    return ctx.hints.cmd(f"answer {shell_quote(thread_id)} -{pin}")


def answer_command(ctx: Ctx, t: threads.Thread) -> str | None:
    """The command that answers waiting thread ``t`` (:func:`answer_hint`),
    as ``show`` and ``waiting`` give it under ``command`` with ``-o json``;
    ``None`` when it does not wait, or waits on several questions at once
    (which ``answer`` cannot tell apart: its program answers them)."""
    if t.status != "waiting" or threads.asks_several(t):
        return None
    return answer_hint(ctx, t.thread_id, t.wait_id)


def pending_interrupts(sv: Services, t: threads.Thread) -> list[dict[str, Any]] | None:
    """The unanswered interrupts of waiting thread ``t`` as ``{"id":
    interrupt id, "value": its value}`` (the id is what its program answers
    by: ``Command(resume={id: value})``), from its row; for a row stored
    before the ids were kept, from its latest root checkpoint, or ``None``
    without the ``langgraph`` extra (the stored values alone are in
    ``interrupts``)."""
    if t.interrupt_ids:
        return [{"id": i, "value": v} for i, v in zip(t.interrupt_ids, t.interrupts, strict=True)]
    thread_id = t.thread_id
    try:
        from desktop_app.integrations.langgraph.saver import FlowdeskSaver
    except ImportError:
        return None
    tup = FlowdeskSaver(sv.checkpoints).get_tuple({"configurable": {"thread_id": thread_id}})
    if tup is None:
        return []
    writes = tup.pending_writes or []
    if any(channel == "__resume__" for _task, channel, _value in writes):
        return []  # answered: nothing pending
    out: list[dict[str, Any]] = []
    for _task, channel, value in writes:
        if channel != "__interrupt__":
            continue
        for one in value if isinstance(value, (list, tuple)) else [value]:
            out.append({"id": getattr(one, "id", None), "value": getattr(one, "value", one)})
    return out


def _answer_lines(ctx: Ctx, t: threads.Thread, indent: str, ids: list[str] | None) -> list[str]:
    """What answers a waiting thread: the ``answer`` command, or, for
    several questions at once (which ``answer`` refuses), how its program
    answers them (and their ids when known)."""
    if not threads.asks_several(t):
        command = answer_hint(ctx, t.thread_id, t.wait_id)
        return [f"{indent}answer it (the answer on standard input): {command}"]
    lines = [
        f"{indent}it waits on {len(t.interrupts)} questions at once, which `flowdesk answer` "
        f"cannot tell apart. {threads.several_hint(t.thread_id)}"
    ]
    if ids:
        lines.append(f"{indent}interrupt ids: {', '.join(ids)}")
    else:  # each id with its value, for its program
        show = ctx.hints.cmd(f"show {shell_quote(t.thread_id)} -o json")
        lines.append(f"{indent}its interrupt ids with their values: {show}")
    return lines


def _state(sv: Services, thread_id: str) -> dict[str, Any] | None:
    """The channel values of the thread's latest root checkpoint, or ``None``
    without the ``langgraph`` extra."""
    try:
        from desktop_app.integrations.langgraph.saver import FlowdeskSaver
    except ImportError:
        return None
    tup = FlowdeskSaver(sv.checkpoints).get_tuple({"configurable": {"thread_id": thread_id}})
    if tup is None:
        return {}
    return {
        k: v
        for k, v in tup.checkpoint["channel_values"].items()
        if not k.startswith(("branch:", "__"))
    }


def _stopped(sv: Services, thread_id: str) -> Any:
    """``FlowdeskSaver.stopped_at`` of the thread: its nodes that did not
    finish; ``None`` without the ``langgraph`` extra."""
    try:
        from desktop_app.integrations.langgraph.saver import FlowdeskSaver
    except ImportError:
        return None
    return FlowdeskSaver(sv.checkpoints).stopped_at(thread_id)


def show(ctx: Ctx, sv: Services, thread_id: str) -> int:
    """``flowdesk show THREAD``: status, ExecutionContext ids, unanswered
    interrupts (with the command answering them), checkpoints, latest state."""
    t = threads.get_thread(sv.checkpoints, sv.settings.scope, thread_id)
    assert t is not None  # resolved
    now = ctx.judged_now(sv)
    cps = threads.checkpoint_rows(sv.checkpoints, sv.settings.scope, thread_id)
    state = _state(sv, thread_id)
    pending = pending_interrupts(sv, t) if t.status == "waiting" else []
    status = display_status(t, now)
    stopped = _stopped(sv, thread_id) if status in (INTERRUPTED, threads.FAILED) else None
    if ctx.args.output != "text":
        emit_one(
            ctx.args.output,
            {
                **thread_row(t, now),
                "error": "; ".join(f"node {n} raised {e}" for n, e in stopped.failed)
                if stopped is not None and stopped.failed
                else None,
                # nodes that had not finished when its process stopped: run again
                "cut_off_nodes": stopped.running if stopped is not None else [],
                "checkpoints": [
                    {
                        "id": c.checkpoint_id,
                        "parent_id": c.parent_id,
                        "created_at": iso(c.created_at),
                        "pending_writes": c.writes,
                    }
                    for c in cps
                ],
                "pending_interrupts": pending,
                # `answer THREAD VALUE --wait-id ID` answers the question asked there only
                "wait_id": t.wait_id,
                "command": None if status == MOVED else answer_command(ctx, t),
                "state": state,
            },
        )
        return EXIT_OK
    print(f"langgraph thread {one_line(t.thread_id)}  status {status}")
    if status == INTERRUPTED:
        print(
            "interrupted: the process that ran it stopped; its program continues it with "
            + threads.resume_hint(t.thread_id)
        )
    elif status == threads.ANSWERED:
        print("answered: it goes on when its program runs " + threads.resume_hint(t.thread_id))
    elif status == MOVED and (where := moved_to(t.owner)) is not None:
        print(
            f"moved to {where} by flowdesk db copy: its program continues it there, with "
            f"{threads.saver_line(where, ctx.hints.scope)}; nothing on this database does "
            f"(see it there: {moved_hint(ctx.hints, where, t.thread_id)})"
        )
    for line in threads.stopped_lines(stopped) if stopped is not None else []:
        print(visible_controls(line))
    if status == threads.FAILED:  # after the node and its error, which say why
        print("its program continues the thread with " + threads.resume_hint(t.thread_id))
    print(f"started {when(t.created_at)}  updated {when(t.updated_at)} (UTC)")
    ids = "  ".join(f"{one_line(k)} {one_line(str(v))}" for k, v in sorted(t.context.items()))
    print(f"context: {ids}")
    for value in t.interrupts:
        print(visible_controls(f"asks: {json.dumps(value, ensure_ascii=False)}"))
    if t.status == "waiting" and status != MOVED:
        known = [str(i["id"]) for i in pending or [] if i["id"] is not None]
        for line in _answer_lines(ctx, t, "", known):
            print(visible_controls(line))
    print(f"checkpoints: {len(cps)}")
    for c in cps:
        print(f"  {c.checkpoint_id}  {when(c.created_at)}  pending writes {c.writes}")
    if state is None:
        print("state: install flowdesk[langgraph] to see it")
    else:
        print("state:")
        for k, v in state.items():
            text = " ".join(json.dumps(v, ensure_ascii=False, default=str).split())
            print(visible_controls(f"  {k}: {text if len(text) <= 100 else text[:99] + '…'}"))
    return EXIT_OK


def interrupted_threads(sv: Services) -> list[threads.Thread]:
    """The threads of this scope shown ``interrupted`` (their last writer
    stopped mid-step); ``resume --all`` names them, it cannot run them."""
    now = sv.checkpoints.now()
    return [
        t
        for t in threads.list_threads(sv.checkpoints, sv.settings.scope, statuses=["running"])
        if display_status(t, now) == INTERRUPTED
    ]


def waiting_threads(sv: Services) -> list[threads.Thread]:
    """The threads of this scope waiting for an answer."""
    return threads.list_threads(sv.checkpoints, sv.settings.scope, statuses=["waiting"])


def print_waiting(ctx: Ctx, asking: list[threads.Thread]) -> None:
    """``waiting``'s text lines for ``asking``: each question and the command
    that answers it."""
    for t in asking:
        print(f"langgraph thread {one_line(t.thread_id)}")
        for value in t.interrupts:
            print(visible_controls(f"  asks: {json.dumps(value, ensure_ascii=False)}"))
        for line in _answer_lines(ctx, t, "  ", None):
            print(visible_controls(line))


def answer(sv: Services, thread_id: str, value: Any, wait_id: str | None = None) -> int:
    """``flowdesk answer THREAD [VALUE]``: store the answer the thread's
    ``interrupt()`` receives when its program runs the graph again.

    ``wait_id``: the question that was read (as ``show`` and ``waiting``
    print it); ``None``: the question the thread asks now.

    Raises:
        see :func:`threads.store_answer`.
    """
    t = threads.store_answer(sv.checkpoints, sv.settings.scope, thread_id, value, wait_id=wait_id)
    print(f"langgraph thread {one_line(t.thread_id)} answered")
    print(f"it goes on when its program runs {threads.resume_hint(t.thread_id)}")
    return EXIT_OK


def not_for_threads(thread_id: str, command: str) -> InputError:
    """The error of a command that does not apply to a LangGraph thread."""
    return InputError(
        f"{thread_id} is a LangGraph thread; `{command}` works on Flowdesk runs. Its program "
        f"continues it with {threads.resume_hint(thread_id)}"
    )
