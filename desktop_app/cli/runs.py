"""Reading and steering runs: ``runs``, ``show``, ``watch``, ``waiting``,
``resume``, ``cancel``, ``undo``. Flow runs and agent runs alike; every run id may be
a unique prefix (:func:`desktop_app.store.runids.resolve_run_id`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from desktop_app.cli.common import Ctx
from desktop_app.cli.output import (
    EXIT_FAILED,
    EXIT_OK,
    damaged_run_commands,
    damaged_run_hints,
    due_in,
    emit_all,
    emit_one,
    iso,
    moved_hint,
    moved_json,
    moved_line,
    moved_waiting,
    progress_text,
    step_listener,
    version_refusal,
    when,
)
from desktop_app.cli.waits import (
    PAST_RUN_DEADLINE,
    after_run_deadline,
    agent_next,
    agent_wait_lines,
    agent_waits,
    answer_choices,
    answer_type,
    refused_lines,
    run_deadline_lines,
    run_deadline_passed,
    signal_type,
    too_late,
    too_late_lines,
    wait_command,
    wait_lines,
)
from desktop_app.errors import (
    CheckpointDecodeError,
    DiskFullError,
    FlowVersionMismatchError,
    InputError,
    RunLeasedError,
    RunStateError,
    StoreError,
    moved_to,
)
from desktop_app.runs_view import (
    AGENT_AS_FLOW_STATUS,
    BEING_MADE,
    ENDED,
    INTENT_NOUNS,
    INTERRUPTED,
    MAY_HAVE_BEEN_MADE,
    MOVED,
    MOVED_DELIVERY,
    claim_is_live,
    display_status,
    holder_words,
    making_text,
    processes_text,
    queued_text,
    sending_split,
    steps_in_order,
    stopped_holder,
    stopped_holder_words,
    unsettled_text,
)
from desktop_app.store.records import RUN_STATUSES, RunStatus
from desktop_app.textsafe import (
    fit_cells_keeping_end,
    one_line,
    shell_quote,
    visible_controls,
    visible_json,
)
from desktop_app.words import plural, step_status_text

if TYPE_CHECKING:
    from desktop_app.bootstrap import Services

#: end statuses that mean the run did not do its job (``watch`` exits 1)
FAILED = {"failed", "timed_out", "timeout", "expired", "rate_limited"}


def flow_row(
    r: Any,
    now: float,
    undelivered: int = 0,
    sending: int = 0,
    being_made: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A flow run as JSON; ``status`` is what is shown (``interrupted`` when
    no process executes it any more, judged at ``now``, the store's clock),
    ``stored_status`` the status saved in the database, ``undelivered`` its
    outbox intents not delivered yet (``Outbox.undelivered_intents``), of
    which ``sending`` have begun (``Outbox.sending_intents``): ``being_made``
    of those by a live process (owner id -> how many,
    :func:`~desktop_app.runs_view.sending_split`), the rest may have been made;
    ``holder_stopped`` the pid of its lease holder when that is a stopped
    process of this host (Ctrl-Z: it runs nothing until continued), else null;
    ``context`` its ExecutionContext ids (tenant, user, session, run, trace,
    correlation; those it has)."""
    shown = display_status(r, now)
    return {
        "kind": "flow",
        "run_id": r.run_id,
        "flow": r.flow_name,
        "status": shown,
        "stored_status": r.status,
        "progress": list(r.progress) if r.progress else None,
        "created_at": iso(r.created_at),
        "updated_at": iso(r.updated_at),
        "error": r.error,
        "flow_key": r.flow_key,
        "parent_run_id": r.parent_run_id,
        "deadline_at": iso(r.deadline_at),
        "lease_owner": r.lease_owner,
        "lease_expires_at": iso(r.lease_expires_at),
        "undelivered": undelivered,
        "sending": sending,
        "being_made": dict(being_made or {}),
        "holder_stopped": stopped_holder(r) if shown in ("running", "pending") else None,
        "context": dict(r.context or {}),
    }


def agent_row(r: Any, now: float) -> dict[str, Any]:
    """An agent run as JSON, ``status`` and ``stored_status`` as in :func:`flow_row`."""
    return {
        "kind": "agent",
        "run_id": r.run_id,
        "flow": r.agent,
        "status": display_status(r, now),
        "stored_status": r.status,
        "progress": None,
        "turns": r.turns,
        "created_at": iso(r.created_at),
        "updated_at": iso(r.updated_at),
        "error": r.error,
        "parent_run_id": r.parent_run_id,
        "deadline_at": iso(r.deadline_at),
        "retry_at": iso(r.retry_at),
        "lease_owner": r.lease_owner,
        "lease_expires_at": iso(r.lease_expires_at),
        "context": dict(r.context or {}),
    }


def _context_is(context: Any, *, tenant: str | None, session: str | None) -> bool:
    """Whether a run's ExecutionContext ids (a mapping) are ``--tenant``'s
    and ``--session``'s (each only when given)."""
    ids = context or {}
    return (tenant is None or ids.get("tenant_id") == tenant) and (
        session is None or ids.get("session_id") == session
    )


def cmd_runs(ctx: Ctx) -> int:
    a = ctx.args
    sv = ctx.services()
    rows: list[tuple[float, dict[str, Any]]] = []
    wanted = set(a.status or [])
    now = ctx.judged_now(sv)
    changed: set[str] = set()  # flow runs whose flow changed since they started
    if a.kind in (None, "flow"):
        undelivered = sv.checkpoints.undelivered_intents()
        sending = sv.checkpoints.sending_intents()
        for r in _flow_runs_shown(sv, a, wanted, now):
            if stuck_on_version(sv, r) is not None:
                changed.add(r.run_id)
            made_by = _being_made(sv.checkpoints, r.run_id, now) if sending.get(r.run_id) else {}
            row = flow_row(r, now, undelivered.get(r.run_id, 0), sending.get(r.run_id, 0), made_by)
            rows.append((r.created_at, row))
    if a.kind in (None, "agent"):
        for ar in sv.agents.list(agent=a.flow):
            if ar.parent_run_id and not a.children:
                continue
            if not _context_is(ar.context, tenant=a.tenant, session=a.session):
                continue
            as_shown = display_status(ar, now)
            if wanted and not ({as_shown, AGENT_AS_FLOW_STATUS.get(as_shown)} & wanted):
                continue
            rows.append((ar.created_at, agent_row(ar, now)))
    if a.kind in (None, "langgraph") and a.flow in (None, "graph"):
        from desktop_app.cli import langgraph

        rows += langgraph.thread_rows(sv, a, now)
    rows.sort(key=lambda t: (t[0], t[1]["run_id"]), reverse=True)
    shown = [row for _, row in rows[: a.limit]]
    for row in shown:
        if row["kind"] == "flow":
            row["damaged"] = _damaged(sv, row)
    if a.flow is not None and not shown:
        _known_flow(ctx, sv, a.flow)
    if a.output != "text":
        emit_all(a.output, shown)
        return EXIT_OK
    if not shown:
        print("no runs")
        return EXIT_OK
    print(
        f"{'RUN':32}  {'KIND':9}  {'FLOW':12} {'STATUS':14} {'PROGRESS':>11}  "
        f"{'STARTED (UTC)':19}  UPDATED (UTC)"
    )
    for row in shown:
        prog = "-"  # a LangGraph thread's progress is its checkpoints, not counted here
        if row["kind"] == "flow":
            prog = progress_text(row["progress"])
        elif row["kind"] == "agent":
            prog = plural(row["turns"], "turn")
        being_made = row.get("being_made") or {}
        making_said = making_text(row["flow"], being_made)
        unsettled = unsettled_text(
            row["flow"], (row.get("sending") or 0) - sum(being_made.values())
        )
        queued = queued_text(row["flow"], (row.get("undelivered") or 0) - (row.get("sending") or 0))
        # nothing configured like this process goes on with it: `show` says what to set
        stranded = (
            row["kind"] == "flow"
            and row["status"] in ("pending", INTERRUPTED)
            and row["flow"] not in sv.engine.flows
        )
        print(
            f"{fit_cells_keeping_end(one_line(row['run_id']), 32)}  {row['kind']:9}  "
            f"{row['flow']:12} "
            f"{row['status']:14} "
            f"{prog:>11}  {_table_time(row['created_at'])}  {_table_time(row['updated_at'])}"
            + (f"  · {queued}" if queued else "")
            + (f"  · {making_said}" if making_said else "")
            + (f"  · {unsettled}" if unsettled else "")
            + ("  · its flow is not registered here (see show)" if stranded else "")
            + ("  · its checkpoint is damaged (see show)" if row.get("damaged") else "")
            + (
                f"  · its process {row['holder_stopped']} is stopped (see show)"
                if row.get("holder_stopped")
                else ""
            )
            + (
                "  · its flow changed since it started (see show)"
                if row["kind"] == "flow" and row["run_id"] in changed and row["status"] != MOVED
                else ""
            )
        )
    return EXIT_OK


def _damaged(sv: Services, row: Mapping[str, Any]) -> bool:
    """Whether the flow run of ``row`` (:func:`flow_row`) has a checkpoint
    that cannot be read (edited, deleted, cut short outside Flowdesk), as
    ``show`` finds it; read only for a run something still goes on with
    (an ended or moved one is not read again)."""
    if row["stored_status"] in ENDED or row["status"] == MOVED:
        return False
    try:
        sv.checkpoints.latest(row["run_id"])
    except CheckpointDecodeError:
        return True
    return False


def _known_flow(ctx: Ctx, sv: Services, name: str) -> None:
    """Check ``runs --flow NAME`` names a flow: one registered, the app's
    ``ask`` agent, ``graph`` (LangGraph threads), or the flow or agent of
    any run of this scope (a flow no longer registered keeps its runs).

    Raises:
        UnknownFlowError: none of these (exit 2), naming the nearest flow and
            the command that lists them.
    """
    import difflib

    from desktop_app.errors import UnknownFlowError

    known = {*sv.engine.flows, "ask", "graph"}
    if (
        name in known
        or sv.checkpoints.list_runs(flow_name=name, limit=1)
        or sv.agents.list(agent=name)
    ):
        return
    near = difflib.get_close_matches(name, sorted(known), n=1)
    meant = f"; did you mean {near[0]!r}?" if near else ""
    raise UnknownFlowError(
        f"no flow named {name!r} and no run of one{meant} (`{ctx.hints.cmd('flows')}` "
        "lists the flows)"
    )


def _flow_runs_shown(sv: Services, a: Any, wanted: set[str], now: float) -> list[Any]:
    """The newest ``--limit`` flow runs that pass ``runs``' filters, where
    ``--status`` is the status *shown*: ``interrupted`` finds running (and
    leased pending) runs no process executes, and ``running`` leaves those
    out; ``moved`` finds the unfinished runs ``db copy`` moved, which no
    other status finds. Read in pages of ``--limit`` rows from the stored
    statuses that can show as the wanted ones."""
    stored: list[RunStatus] | None = None
    if wanted:
        can_show: set[RunStatus] = {s for s in RUN_STATUSES if s in wanted}
        if INTERRUPTED in wanted:
            can_show |= {"running", "pending"}
        if MOVED in wanted:
            can_show |= {s for s in RUN_STATUSES if s not in ENDED}
        stored = sorted(can_show)
        if not stored:
            return []
    out: list[Any] = []
    offset = 0
    while len(out) < a.limit:
        page = sv.checkpoints.list_runs(
            statuses=stored,
            flow_name=a.flow,
            newest_first=True,
            limit=a.limit,
            offset=offset,
            tenant_id=a.tenant,
            session_id=a.session,
        )
        out += [r for r in page if not wanted or display_status(r, now) in wanted]
        if len(page) < a.limit:
            break
        offset += len(page)
    return out[: a.limit]


def _table_time(text: str | None) -> str:
    return "-" if text is None else text[:19].replace("T", " ")


# -- show ------------------------------------------------------------------

#: files of a tidy run listed one a line by ``answer``/``resume`` (``show``: :data:`SHOW_FILES`)
ANSWER_FILES = 20
#: files of a tidy run ``show`` lists one a line (``-o json`` gives every one)
SHOW_FILES = 200


def delivery_lines(
    ctx: Ctx, run: Any, unsent: list[Any], being_made: Mapping[str, int] | None = None
) -> list[str]:
    """Who delivers run ``run``'s intents not delivered yet (``unsent``),
    as ``show`` says it, each a thing the person can do as printed: a
    program's own destination (one no Flowdesk process knows) is delivered by
    that program's dispatcher, never by ``flowdesk``; a built-in one of an
    ended run by the live process making some of them now (``being_made``:
    owner id -> how many, :func:`~desktop_app.runs_view.sending_split`), else
    by the next delivery (``resume --all``, the agent, the app), which looks
    up first each that may have been made."""
    from desktop_app.flows import BUILTIN_DESTINATIONS

    one, many = INTENT_NOUNS.get(run.flow_name, ("side effect", "side effects"))
    lines = []
    ours = [i for i in unsent if i.destination in BUILTIN_DESTINATIONS]
    if ours and run.status in ENDED:
        # no step of the run makes them any more: a dispatcher does, and the
        # one that queued them may be gone (an `answer` killed mid-delivery)
        sending = sum(i.status == "sending" for i in ours)
        if being_made:  # a live delivery goes on with them: nothing to do
            lines.append(
                f"its {plural(len(ours), one, many)} not delivered "
                f"{'is' if len(ours) == 1 else 'are'} being delivered now by "
                f"{processes_text(being_made)}"
            )
        else:
            if not sending:
                said = f"its {queued_text(run.flow_name, len(ours))} are made by the next delivery"
                does = "makes them now"
            else:
                said = (
                    f"its {plural(len(ours), one, many)} not delivered are settled by the next "
                    f"delivery, which looks up first the {sending:,} that may have been made "
                    "and makes only what was not"
                )
                does = "settles them now"
            # on PostgreSQL the app leaves delivery to the workers
            who = "a running flowdesk agent" + ("" if ctx.on_postgres else " or the app")
            resume = ctx.hints.cmd("resume --all")
            lines.append(f"{said}: {resume} {does}, as {who} does on its own")
    theirs = [i for i in unsent if i.destination not in BUILTIN_DESTINATIONS]
    if theirs:
        names = sorted({i.destination for i in theirs})
        mapping = ", ".join(f"{n!r}: <your destination>" for n in names)
        lines.append(
            f"its {plural(len(theirs), one, many)} for "
            f"{', '.join(repr(n) for n in names)} "
            f"{'goes' if len(theirs) == 1 else 'go'} to "
            f"{'a destination' if len(names) == 1 else 'destinations'} your program "
            "registered: flowdesk does not deliver "
            f"{'it' if len(theirs) == 1 else 'them'}; your program does, with "
            f"`Dispatcher(store, {{{mapping}}}).dispatch()` (desktop_app.flow.outbox), "
            "which looks up first one that may have been made"
        )
    # why a try did not end delivered (a destination's error; one whose
    # `retryable` is False marked it failed instead)
    tried = [i for i in unsent if i.last_error]
    for i in tried[:3]:
        lines.append(
            f"  {one} {i.intent_id} to {i.destination!r}, {plural(i.attempts, 'try', 'tries')}: "
            f"last error {_clip(i.last_error, 300)}"
        )
    if len(tried) > 3:
        lines.append(f"  and {len(tried) - 3:,} more with an error")
    return lines


def tidy_report(ctx: Ctx, store: Any, run_id: str, *, limit: int) -> list[str]:
    """What happened to each file of tidy run ``run_id``, as printed lines:
    the counts per outcome (``4 files: 3 moved, 1 left (vanished before its
    move)``), a line saying when it was undone (if it was; or that its undo
    is under way, or was interrupted, with how many files are back and the
    command that finishes it), then one line per file, the first ``limit``,
    and for the rest the command that lists them (``show``, or ``show -o
    json`` from ``show`` itself). The words are
    :mod:`desktop_app.flows.tidy_outcomes`' (the app's tidy table's too)."""
    from desktop_app.flows.tidy_outcomes import outcome_counts, outcome_lines

    read = _tidy_moves(store, run_id)
    if isinstance(read, str):
        return _visible([f"files: cannot be read ({read})"])
    moves, undo = read
    outcomes = _outcomes(store, run_id, moves)
    lines = [outcome_counts(outcomes, {"approved": _approved_note(ctx, store, run_id)})]
    said = _undo_said(ctx, run_id, moves, undo)
    if said is not None:
        lines.append(said["says"])
    lines += [f"  {line}" for line in outcome_lines(outcomes[:limit])]
    if len(outcomes) > limit:
        # `show` lists SHOW_FILES: past that, only its JSON lists each
        every = "show -o json" if max(limit, len(outcomes)) > SHOW_FILES else "show"
        more = plural(len(outcomes) - limit, "more file")
        lines.append(f"  … {more}: `{ctx.hints.cmd(f'{every} {run_id}')}` lists each")
    return _visible(lines)


def _outcomes(store: Any, run_id: str, moves: list[Any]) -> list[Any]:
    """Each file's outcome (:func:`~desktop_app.flows.tidy_outcomes.run_outcomes`)
    of tidy run ``run_id``, whose rows are ``moves``, with its moves being sent."""
    from desktop_app.flows.tidy_outcomes import run_outcomes

    return run_outcomes(store, run_id, moves, *_sending_keys(store, run_id))


def _approved_note(ctx: Ctx, store: Any, run_id: str) -> str:
    """What becomes of tidy run ``run_id``'s approved files not queued yet
    (``"approved, not queued yet"``): a live process executing the run
    queues them now; otherwise (interrupted, failed: killed or out of disk
    mid-queueing) they are queued when the run resumes, with the command
    that resumes it."""
    from desktop_app.runs_view import display_status

    run = store.get_run(run_id)
    if display_status(run, store.now()) == "running":
        return " (being queued by the process running it)"
    return f" (queued when the run resumes: `{ctx.hints.cmd(f'resume {run_id}')}`)"


def _undo_said(ctx: Ctx, run_id: str, moves: list[Any], undo: Any) -> dict[str, Any] | None:
    """Where the undo of a tidy run stands (``show``'s line and ``-o json``'s
    ``undo``), or ``None`` when it was never undone: ``state`` is
    ``finished``, ``under_way`` (its process is alive), ``interrupted`` (its
    process stopped before the end: killed, crashed, or an error) or
    ``unknown`` (started on another machine, not finished); ``back`` and
    ``still_moved`` count the files recorded back and still recorded moved
    (an undo records them in batches, so up to
    :data:`~desktop_app.flows.tidy_undo.BACK_BATCH` of the latter may be back
    after an interruption); ``command`` finishes an unfinished one."""
    from desktop_app.flow.owners import liveness
    from desktop_app.flows.tidy_outcomes import was_undone
    from desktop_app.flows.tidy_undo import BACK_BATCH

    back = sum(m.moved_back_at is not None for m in moves)
    still = sum(m.moved_back_at is None and m.status == "moved" for m in moves)
    first = was_undone(moves)
    if first is None and (undo is None or undo.finished_at is not None):
        return None  # never undone, or an undo that found no file to put back
    hint = ctx.hints.cmd(f"undo {run_id}")
    out: dict[str, Any] = {
        "state": "finished",
        "started_at": iso(first if undo is None else undo.started_at),
        "finished_at": None if undo is None else iso(undo.finished_at),
        "owner": None if undo is None else undo.owner,
        "back": back,
        "still_moved": still,
        "command": None,
    }
    files = plural(back + still, "file")
    if undo is None or undo.finished_at is not None:  # (None: undone before tidy_undos was)
        out["says"] = f"undone {when(first)} (UTC): {plural(back, 'file')} moved back"
        return out
    alive = "dead" if undo.owner is None else liveness(undo.owner)
    out["command"] = hint
    if alive == "alive":
        out["state"] = "under_way"
        out["says"] = (
            f"being undone since {when(undo.started_at)} (UTC) by {undo.owner}: "
            f"{back:,} of {files} back so far, {still:,} still moved"
        )
        return out
    maybe = (
        f" (up to {min(still, BACK_BATCH):,} of those may be back: the undo records them "
        f"{BACK_BATCH} at a time)"
        if still
        else ""
    )
    if alive == "dead":
        out["state"] = "interrupted"
        out["says"] = (
            f"undo interrupted: it began {when(undo.started_at)} (UTC) and its process stopped "
            f"with {back:,} of {files} back and {still:,} still moved{maybe}; `{hint}` finishes it"
        )
    else:
        out["state"] = "unknown"
        out["says"] = (
            f"undo not finished: {undo.owner} (another machine) began it "
            f"{when(undo.started_at)} (UTC); {back:,} of {files} back, {still:,} still "
            f"moved{maybe}; if that process stopped, `{hint}` finishes it"
        )
    return out


def _visible(lines: list[str]) -> list[str]:
    return [visible_controls(line) for line in lines]


def _say(line: str) -> None:
    """Print a line that holds what a model or a tool wrote, its control
    characters shown as escapes (:func:`desktop_app.textsafe.visible_controls`)."""
    print(visible_controls(line))


def cmd_show(ctx: Ctx) -> int:
    from desktop_app.bootstrap import executes_runs

    sv = ctx.services()
    ref = ctx.resolve(sv, ctx.args.run_id)
    if ref.kind == "agent":
        return _show_agent(ctx, sv, ref.run_id)
    if ref.kind == "langgraph":
        from desktop_app.cli import langgraph

        return langgraph.show(ctx, sv, ref.run_id)
    store = sv.checkpoints
    run = store.get_run(ref.run_id)
    try:
        cp = store.latest(ref.run_id)
    except CheckpointDecodeError as exc:
        # what the run row, its history and its outbox say is still shown;
        # the error and the commands that work on it follow (exit 1)
        _show_damaged(ctx, sv, run, exc)
        raise
    history = store.history(ref.run_id)
    now = ctx.judged_now(sv)
    status = display_status(run, now)
    unsent = store.open_intents(run.run_id)
    # db copy moved these: the other database's dispatchers deliver them
    moved_away = [i for i in unsent if i.moved_to is not None]
    unsent = [i for i in unsent if i.moved_to is None]
    undelivered = len(unsent)
    sending = sum(i.status == "sending" for i in unsent)
    being_made = _being_made(store, run.run_id, now) if sending else {}
    unknown = unknown_outcomes(store, run.run_id)
    flow = sv.engine.flows.get(run.flow_name)
    choices = dict(cp.meta.get("choices") or {})  # an interrupt's choices
    taken: dict[str, str] = {}  # wait id -> the type its answer must fit
    for w in cp.waits:
        if flow is not None and (only := answer_choices(flow, w.step_id)):
            choices[w.wait_id] = only
        if flow is not None and (kind := answer_type(flow, w.step_id)):
            taken[w.wait_id] = kind
        if (
            flow is not None
            and w.kind in ("signal", "event")
            and (kind := signal_type(flow, w.step_id))
        ):
            taken[w.wait_id] = kind
    # db copy moved it: where, and the command that shows it there; none on this database
    moved = moved_json(ctx.hints, run.run_id, run.lease_owner) if status == MOVED else None
    stuck = None if moved is not None else stuck_on_version(sv, run)
    # its lease holder is a stopped process of this host (Ctrl-Z): nothing moves
    held_still = stopped_holder(run) if status in ("running", "pending") else None
    if ctx.args.output != "text":
        emit_one(
            ctx.args.output,
            {
                **flow_row(run, now, undelivered, sending, being_made),
                "flow_version": run.flow_version,
                # withdrawn mid-send, never looked up: made or not, no one knows
                "unknown_outcome": [_intent_json(i) for i in unknown],
                # not delivered here: db copy moved them (URL -> how many)
                "side_effects_moved": _moved_counts(moved_away),
                "moved": moved,
                # why no process goes on with it (its flow changed), or null
                "stuck": None if stuck is None else version_refusal(ctx.hints, stuck),
                "revision": run.revision,
                "context": dict(run.context),
                "steps": [
                    {
                        "step_id": rec.step_id,
                        "status": rec.status,
                        "attempts": rec.attempts,
                        "iteration": rec.iteration,
                        "started_at": iso(rec.started_at),
                        "finished_at": iso(rec.finished_at),
                        "duration_ms": rec.duration_ms,
                        "next_retry_at": iso(rec.next_retry_at),
                        "error": rec.error,
                    }
                    for rec in steps_in_order(cp.steps)
                ],
                "waits": [
                    {
                        **_wait_row(w),
                        "choices": choices.get(w.wait_id),  # None: any answer
                        # null while stuck or moved, or past the run's own
                        # deadline: no command here moves it on
                        "command": None
                        if stuck is not None or moved is not None or run_deadline_passed(run, now)
                        else wait_command(
                            ctx.hints,
                            run.run_id,
                            w,
                            now=now,
                            choices=choices.get(w.wait_id),
                        ),
                    }
                    for w in cp.waits
                ],
                # signals and events its waits refused (payload did not fit), oldest first
                "refused_signals": [dict(r) for r in cp.meta.get("refused_signals") or []],
                "refused_events": [dict(r) for r in cp.meta.get("refused_events") or []],
                **(_tidy_json(ctx, store, run.run_id) if run.flow_name == "tidy" else {}),
                "checkpoints": _history_json(history),
            },
        )
        return EXIT_OK
    print(
        f"run {run.run_id}  flow {run.flow_name} ({run.flow_version})  status {status}"
        + _delivery_said(run.flow_name, undelivered, sending, being_made)
    )
    for line in delivery_lines(ctx, run, unsent, being_made):
        print(line)
    for where, n in _moved_counts(moved_away).items():
        one, many = INTENT_NOUNS.get(run.flow_name, ("side effect", "side effects"))
        it = "it" if n == 1 else "them"
        print(
            f"its {plural(n, one, many)} not delivered {'was' if n == 1 else 'were'} moved to "
            f"{where} by flowdesk db copy: a dispatcher there delivers {it} ({MOVED_DELIVERY}), "
            f"nothing on this database does; see {it} there: "
            f"{moved_hint(ctx.hints, where, run.run_id)}"
        )
    if unknown:
        _say(unknown_line(run.flow_name, unknown))
    if status == MOVED:
        _say(moved_line(ctx.hints, run.run_id, run.lease_owner) or "")
    elif stuck is not None:
        _say(stuck_line(ctx, stuck))
    elif status == INTERRUPTED:
        first = needs_model(sv, run) or unregistered(sv, run) or state_misfit(sv, run, cp)
        print(_interrupted_line(ctx, run, first=first))
    elif status == "pending" and (why := unregistered(sv, run)) is not None:
        print(f"pending: {why}; then {ctx.hints.cmd(f'resume {run.run_id}')} starts it")
    elif status == "pending" and not executes_runs(sv.settings):  # PostgreSQL's workers
        print(
            "pending: saved for a worker of this database and scope to execute (a worker "
            f"of another scope never takes it); `{ctx.hints.cmd('agent')}` starts one"
        )
    elif status == "waiting" and (why := unregistered(sv, run) or state_misfit(sv, run, cp)):
        print(f"waiting: {why}; then the commands below move it on")
    elif held_still is not None:
        print(f"{status}: {stopped_holder_words(held_still)}")
    elif status == "running" and run.lease_owner is not None:  # who moves it on (a worker?)
        print(f"running: being executed by {holder_words(run.lease_owner)}")
    if run.error and run.status != "waiting":
        _say(f"error: {run.error}")
    if status == "failed":  # what start, resume and answer print for it too
        from desktop_app.cli.start import cannot_continue

        first = unregistered(sv, run) or state_misfit(sv, run, cp)
        if not cannot_continue(run.error):
            then = "" if first is None else f"{first}; then "
            _say(f"failed: {then}resume with: {ctx.hints.cmd(f'resume {run.run_id}')}")
    if moved is None and stuck is None:  # else nothing here moves it (said above)
        for line in run_deadline_lines(ctx.hints, run, now):
            print(line)
    if cp.waits or run.status == "waiting":
        print("waits for:")
        lines = wait_lines(
            ctx.hints,
            run,
            cp.waits,
            now,
            choices,
            stuck=stuck is not None,
            moved=moved is not None,
            taken=taken,
            registered=flow is not None,
            app_fires=executes_runs(sv.settings),
        )
        for line in lines:
            print(line)
    for line in refused_lines(cp):
        print(line)
    if run.flow_name == "tidy":
        for line in tidy_report(ctx, store, run.run_id, limit=SHOW_FILES):
            print(line)
    print("steps:")
    for rec in steps_in_order(cp.steps):
        extra = f" iteration {rec.iteration}" if rec.iteration else ""
        err = f"  {rec.error}" if rec.error else ""
        status = step_status_text(rec.status, cp.status)
        _say(f"  {rec.step_id:16} {status:12} attempts {rec.attempts}{extra}{err}")
    print(f"checkpoints: {len(history)}")
    shown = history if len(history) <= 12 else history[:5] + history[-5:]
    for i, info in enumerate(shown):
        if len(history) > 12 and i == 5:
            print(f"  … {len(history) - 10} more")
        print(f"  {info.id}  {info.status:10} {info.step_id:16} {when(info.created_at)}")
    return EXIT_OK


def _show_damaged(ctx: Ctx, sv: Services, run: Any, exc: CheckpointDecodeError) -> None:
    """What ``show`` prints of flow run ``run`` (a ``RunRecord``) whose
    latest checkpoint cannot be read (``exc``: damaged on disk, or a
    malformed record): its id, flow, status, revision, times, context ids,
    outbox intents not delivered yet and checkpoint list, none of which
    needs the damaged state; with ``--output json``, the same as an object
    whose ``steps`` and ``waits`` are ``null`` and whose ``damaged`` holds
    the error and the commands that work on the run. The caller then raises
    ``exc``, printed with those commands on stderr (exit 1)."""
    store = sv.checkpoints
    now = store.now()
    unsent = store.open_intents(run.run_id)
    sending = sum(i.status == "sending" for i in unsent)
    being_made = _being_made(store, run.run_id, now) if sending else {}
    unknown = unknown_outcomes(store, run.run_id)
    history = store.history(run.run_id)
    if ctx.args.output != "text":
        emit_one(
            ctx.args.output,
            {
                **flow_row(run, now, len(unsent), sending, being_made),
                "flow_version": run.flow_version,
                "revision": run.revision,
                "context": dict(run.context),
                "intents": [_intent_json(i) for i in unsent],
                "unknown_outcome": [_intent_json(i) for i in unknown],
                "steps": None,  # held in the damaged checkpoint
                "waits": None,
                "damaged": {
                    "error": str(exc),
                    "commands": [c for _, c in damaged_run_commands(ctx.hints, exc)],
                },
                "checkpoints": _history_json(history),
            },
        )
        return
    print(
        f"run {run.run_id}  flow {run.flow_name} ({run.flow_version})  "
        f"status {display_status(run, now)}"
        + _delivery_said(run.flow_name, len(unsent), sending, being_made)
    )
    print(
        f"revision {run.revision} (damaged: its state cannot be read)  "
        f"started {iso(run.created_at)} · updated {iso(run.updated_at)}"
    )
    ids = [f"{k}={v}" for k, v in run.context.items() if v is not None]
    if ids:
        _say("context: " + ", ".join(ids))
    for line in delivery_lines(ctx, run, unsent, being_made):
        print(line)
    if unknown:
        _say(unknown_line(run.flow_name, unknown))
    for i in unsent:
        _say(f"outbox: {i.intent_id}  {i.destination}  {i.status}")
    if run.error:
        _say(f"error: {run.error}")
    print(f"checkpoints: {len(history)}")
    for info in history if len(history) <= 12 else history[-10:]:
        print(f"  {info.id}  {info.status:10} {info.step_id:16} {when(info.created_at)}")


def _intent_json(i: Any) -> dict[str, Any]:
    """An outbox intent as ``show -o json`` gives it."""
    return {
        "intent_id": i.intent_id,
        "step_id": i.step_id,
        "destination": i.destination,
        "status": i.status,
        "attempts": i.attempts,
        "last_error": i.last_error,
    }


def unknown_outcomes(store: Any, run_id: str) -> list[Any]:
    """Run ``run_id``'s intents a cancel withdrew mid-send with no way to
    check whether they were made (:data:`~desktop_app.flow.outbox.OUTCOME_UNKNOWN`):
    never sent again, their outcome unknown for good."""
    from desktop_app.flow.outbox import OUTCOME_UNKNOWN

    return [i for i in store.failed_intents(run_id) if i.last_error == OUTCOME_UNKNOWN]


def unknown_line(flow_name: str, unknown: list[Any]) -> str:
    """What ``show`` says of :func:`unknown_outcomes`: how many, that
    Flowdesk never makes them again, and where to check."""
    one, many = INTENT_NOUNS.get(flow_name, ("side effect", "side effects"))
    n = len(unknown)
    where = ", ".join(sorted({repr(i.destination) for i in unknown}))
    ids = ", ".join(i.intent_id for i in unknown[:3]) + (" …" if n > 3 else "")
    return (
        f"outcome unknown: {plural(n, one, many)} withdrawn mid-send (the process sending "
        f"{'it' if n == 1 else 'them'} stopped, or the send failed midway) and never looked "
        f"up; Flowdesk never makes {'it' if n == 1 else 'them'} again: check at {where} "
        f"whether {'it was' if n == 1 else 'they were'} made ({ids})"
    )


def _history_json(history: list[Any]) -> list[dict[str, Any]]:
    """``show -o json``'s ``checkpoints``: one object per stored checkpoint."""
    return [
        {
            "id": i.id,
            "revision": i.revision,
            "status": i.status,
            "step_id": i.step_id,
            "created_at": iso(i.created_at),
        }
        for i in history
    ]


def _delivery_said(
    flow_name: str, undelivered: int, sending: int, being_made: Mapping[str, int]
) -> str:
    """``show``'s words after a run's status for its intents not delivered:
    `` · 2 moves queued (not made yet) · 1 move being made now by process 4242
    on host box (...)``; those ``sending`` whose process is gone (not in
    ``being_made``) may have been made (:data:`MAY_HAVE_BEEN_MADE`)."""
    queued = queued_text(flow_name, undelivered - sending)
    making = making_text(flow_name, being_made)
    unsettled = unsettled_text(flow_name, sending - sum(being_made.values()))
    return (
        (f" · {queued} (not made yet)" if queued else "")
        + (f" · {making} ({BEING_MADE})" if making else "")
        + (f" · {unsettled} ({MAY_HAVE_BEEN_MADE})" if unsettled else "")
    )


def _moved_counts(intents: list[Any]) -> dict[str, int]:
    """Where ``db copy`` moved ``intents`` (their ``moved_to``) -> how many."""
    from collections import Counter

    return dict(Counter(i.moved_to for i in intents))


def _being_made(store: Any, run_id: str, now: float) -> dict[str, int]:
    """Owner id -> how many of run ``run_id``'s intents ``sending`` that
    live process is making now (:func:`~desktop_app.runs_view.sending_split`)."""
    return sending_split(store.sending_claims(run_id), now)[0]


def _sending_keys(store: Any, run_id: str) -> tuple[set[str], set[str]]:
    """The keys of run ``run_id``'s intents ``sending``, and of those a live
    process is making now (:func:`~desktop_app.runs_view.claim_is_live`);
    the others may have been made."""
    claims = store.sending_claims(run_id)
    now = store.now()
    live = {k for k, (o, u) in claims.items() if o is not None and claim_is_live(o, u, now)}
    return set(claims), live


def _tidy_moves(store: Any, run_id: str) -> tuple[list[Any], Any] | str:
    """The ``tidy_moves`` rows of ``run_id`` and its latest undo (a
    ``TidyUndo``, or ``None``), or why they cannot be read (a table dropped
    or damaged behind Flowdesk's back): ``show`` still shows the run, and
    says so, rather than failing whole."""
    from desktop_app.store.domain.tidy import moves_of_run, undo_of

    try:
        return list(store.query(moves_of_run(run_id))), store.query(undo_of(run_id))
    except StoreError as exc:
        return str(exc)


def _tidy_json(ctx: Ctx, store: Any, run_id: str) -> dict[str, Any]:
    """``show -o json``'s ``files`` (each file's outcome, as
    :func:`tidy_report` words it), ``undone_at`` (when the first file was
    put back) and ``undo`` (:func:`_undo_said`: where its undo stands) of a
    tidy run."""
    from desktop_app.flows.tidy_outcomes import OUTCOMES, was_undone

    read = _tidy_moves(store, run_id)
    if isinstance(read, str):
        return {"files": None, "files_error": read, "undone_at": None, "undo": None}
    moves, undo = read
    notes = {"approved": _approved_note(ctx, store, run_id)}
    return {
        "files": [
            {
                "name": o.name,
                "kind": o.kind,
                "outcome": o.outcome,
                "says": OUTCOMES[o.outcome] + notes.get(o.outcome, ""),
                "detail": o.detail,
            }
            for o in _outcomes(store, run_id, moves)
        ],
        "undone_at": iso(was_undone(moves)),
        "undo": _undo_said(ctx, run_id, moves, undo),
    }


def _clip(text: str, n: int = 100) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


def _interrupted_line(ctx: Ctx, run: Any, first: str | None = None) -> str:
    """Why a run shows ``interrupted`` and the command that continues it
    (after ``first``, what must be done before it works, when given)."""
    owner = f" ({run.lease_owner})" if run.lease_owner else ""
    hint = ctx.hints.cmd(f"resume {run.run_id}")
    then = "" if first is None else f"{first}; then "
    return f"interrupted: the process that ran it{owner} stopped; {then}{hint} continues it"


def stuck_on_version(sv: Services, run: Any) -> Any:
    """The ``FlowVersionMismatchError`` that refuses flow run ``run`` (a
    ``RunRecord``) in this process, or ``None``: a live run (pending,
    running, waiting or failed) of a registered flow whose version is
    neither the registered one nor a mode registered here
    (``Engine.runs_version``). No process with the flow's current code
    resumes it, fires its timer or takes its answer."""
    if run.status not in ("pending", "running", "waiting", "failed"):
        return None
    return sv.engine.version_refusal(run)


def needs_model(sv: Services, run: Any) -> str | None:
    """What to set before flow run ``run`` (a ``RunRecord``) can go on here,
    or ``None``: a ``digest --model`` run summarises with the configured
    model, and these settings configure none."""
    from desktop_app.flows.digest import model_version

    if run.flow_name != "digest" or run.flow_version != model_version():
        return None
    missing = _no_model_here(sv)
    return None if missing is None else f"it was started with --model and {missing}"


def _no_model_here(sv: Services) -> str | None:
    """What to set when these settings configure no model (``None``: one
    is), as :func:`needs_model` and :func:`agent_blocker` say it: neither
    ``resume`` here nor a worker configured like this process goes on."""
    if sv.settings.model.configured:
        return None
    return (
        "no model is configured here: set FLOWDESK_MODEL__BASE_URL and FLOWDESK_MODEL__MODEL "
        "(or [model] in the settings file)"
    )


def unregistered(sv: Services, run: Any) -> str | None:
    """What to set before flow run ``run`` (a ``RunRecord``) can go on here,
    or ``None``: its flow is not registered in this process, so neither
    ``resume`` here nor a worker configured like this one runs it."""
    if run.flow_name in sv.engine.flows:
        return None
    failed = [p.source for p in sv.flow_problems]
    if failed:  # the setting names flows already: one may be this one, failing to load
        return (
            f"its flow {run.flow_name!r} is not registered here: the flows setting names "
            f"{', '.join(failed)}, which failed to load (the warning above says why); if "
            "its flow is among them, fix that, else add the module attribute that defines "
            "it to FLOWDESK_FLOWS (the flows setting), here and on each worker (flowdesk agent)"
        )
    return (
        f"its flow {run.flow_name!r} is not registered here, so no process configured like "
        "this one resumes it: set FLOWDESK_FLOWS (the flows setting) to the module attribute "
        "that defines it, here and on each worker (flowdesk agent)"
    )


def state_misfit(sv: Services, run: Any, cp: Any) -> str | None:
    """What to change before flow run ``run`` can go on here when the state
    of its checkpoint ``cp`` no longer fits its registered flow's state
    model (a field's type changed since it started: a flow's version
    fingerprints its fields' names, not their types), or ``None``. Decodes
    the state once (``show`` only)."""
    from desktop_app.flow.state import load_state

    flow = sv.engine.flows.get(run.flow_name)
    if flow is None or flow.version != run.flow_version:
        return None
    try:
        load_state(flow.state_type, cp.state, run.run_id, cp.revision)
    except CheckpointDecodeError as exc:
        where = f" at field {exc.field_path!r}" if exc.field_path else ""
        mend = f" (or {exc.mend})" if exc.mend else ""
        return (
            f"its stored state no longer fits flow {run.flow_name!r}'s state model{where} "
            f"({_clip(exc.reason, 200)}): change the model back to what the run stored{mend}"
        )
    return None


def refuse_unregistered(ctx: Ctx, sv: Services, run_id: str, what: str) -> None:
    """Refuse ``what`` (``resume``, ``answer``) for flow run ``run_id`` when
    its flow is not registered in this process, saying how to register it.

    Raises:
        UnknownFlowError: its flow is not registered here (exit 2); nothing
            was run or answered.
    """
    from desktop_app.errors import CheckpointNotFoundError, UnknownFlowError

    try:
        run = sv.checkpoints.get_run(run_id)
    except CheckpointNotFoundError:
        return  # the engine says so
    why = unregistered(sv, run)
    if why is not None:
        raise UnknownFlowError(
            f"run {run_id} cannot be {what} here: {why}; then run this command again "
            f"(`{ctx.hints.cmd(f'show {run_id}')}` says what it waits for)"
        )


def stuck_line(ctx: Ctx, mismatch: Any) -> str:
    """``show``'s line for a run stuck on a version mismatch
    (:func:`stuck_on_version`): said plainly, with what works."""
    return (
        "stuck: its flow changed since it started, so nothing runs it, fires its timers or "
        "takes its answers (not flowdesk agent, not the app, not resume): "
        + version_refusal(ctx.hints, mismatch)
    )


def agent_blocker(sv: Services, run: Any) -> str | None:
    """What must be done before agent run ``run`` (an ``AgentRun``) can be
    resumed or answered here, or ``None``: a Pydantic AI agent's run needs
    its agent registered in this process's settings
    (:func:`~desktop_app.agent.recovery.pydantic_ai_unavailable` says how);
    Flowdesk's own agent runs need a model configured (a worker without one
    leaves them as they are: a tryout's run stayed ``interrupted`` with no
    word why)."""
    from desktop_app.agent.recovery import ToolSources, pydantic_ai_unavailable

    sources = ToolSources.of_run(sv.agents, run.run_id)
    if sources.pydantic_ai is not None:
        return pydantic_ai_unavailable(sv.settings, sources)
    return _no_model_here(sv)


def _cut_off_line(sv: Services, run: Any) -> str:
    """What the resume of interrupted agent run ``run`` does with a tool
    call its process was making when it stopped (``cut off`` in ``show``)."""
    from desktop_app.agent.recovery import ToolSources

    if ToolSources.of_run(sv.agents, run.run_id).pydantic_ai is not None:
        return (
            "cut off: its process stopped during the call, before its result was saved; the "
            "resume makes it again (at least once, as a Temporal activity) unless its tool "
            "asked your approval; then it records the call's outcome as unknown and does not "
            "make it again"
        )
    return (
        "cut off: its process stopped during the call, before its result was saved; the "
        "resume makes it again only when its tool is harmless to repeat (read-only, or "
        "idempotent and not destructive) and asked no approval; otherwise it records the "
        "call's outcome as unknown and does not make it again"
    )


def _show_agent(ctx: Ctx, sv: Services, run_id: str) -> int:
    from desktop_app.agent.approvals import declined_result
    from desktop_app.agent.messages import call_status, is_outcome_unknown
    from desktop_app.agent.tools import is_tool_call

    run = sv.agents.get(run_id)
    messages = sv.agents.messages(run_id)
    tools = sv.agents.tool_results(run_id)
    now = ctx.judged_now(sv)
    status = display_status(run, now)
    # db copy moved it: where, and the command that shows it there; none on this database
    moved = moved_json(ctx.hints, run.run_id, run.lease_owner) if status == MOVED else None
    if ctx.args.output != "text":
        waits = agent_waits(ctx.hints, run)
        if moved is not None:  # answered there: no command here
            waits = [
                {**w, **({"commands": None} if "commands" in w else {"command": None})}
                for w in waits
            ]
        emit_one(
            ctx.args.output,
            {
                **agent_row(run, now),
                "moved": moved,
                "input": run.input,
                "response": run.response,
                "expires_at": iso(run.expires_at),
                "pending_call": run.pending_call,
                "waits": waits,
                # failed or rate_limited: what to run next, as `ask` printed it
                "next": None if moved is not None else agent_next(ctx.hints, run),
                # what must be done before resume/answer work here, or null
                "first": (
                    agent_blocker(sv, run)
                    if display_status(run, now) in (INTERRUPTED, "input_required")
                    else None
                ),
                "context": run.context,
                "messages": messages,
                "tool_results": [
                    {
                        "tool_key": t.tool_key,
                        "tool": t.tool,
                        "status": t.status,
                        "attempts": t.attempts,
                        "reused": t.reused,
                        "outcome_unknown": is_outcome_unknown(t.result),
                        "result": t.result,
                        "kind": "call" if is_tool_call(t.tool_key) else "record",
                    }
                    for t in tools
                ],
            },
        )
        return EXIT_OK
    # turns: the model's replies so far; the conversation is listed under messages:
    _say(f"agent run {run.run_id}  agent {run.agent}  status {status}  model turns {run.turns}")
    # resume and answer refuse a run whose Pydantic AI agent is not registered: how to, first
    why = agent_blocker(sv, run) if status in (INTERRUPTED, "input_required") else None
    if status == MOVED:
        _say(moved_line(ctx.hints, run.run_id, run.lease_owner) or "")
    elif status == INTERRUPTED:
        _say(_interrupted_line(ctx, run, why))
    _say(f"started {when(run.created_at)}  updated {when(run.updated_at)} (UTC)")
    if run.error:
        _say(f"error: {run.error}")
    then = None if moved is not None else agent_next(ctx.hints, run)
    if then is not None:  # as `ask` printed it when the run stopped
        _say(f"next: {then}")
    asking = agent_wait_lines(ctx.hints, run, now, first=why, moved=moved is not None)
    if asking:
        print("waits for:")
        for line in asking:
            print(line)
    _say("messages:")
    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "tool":
            reused = " (reused)" if m.get("reused") else ""
            if is_outcome_unknown(m.get("content")):
                reused += " (outcome unknown: not repeated)"
            _say(f"  tool {m.get('name')}{reused}: {_clip(m.get('content') or '')}")
            continue
        if m.get("content"):
            _say(f"  {m['role']}: {_clip(m['content'])}")
        for call in m.get("tool_calls", []):
            args = visible_json(call.get("arguments"), sort_keys=True)
            _say(f"  {m['role']} calls {call['name']} {_clip(args, 80)}")
    calls = [t for t in tools if is_tool_call(t.tool_key)]
    # a call a person declined never ran (no journal row): its answer to the model says so
    declined = [
        str(m.get("name"))
        for m in messages
        if m["role"] == "tool" and m.get("content") == declined_result(str(m.get("name")))
    ]
    _say(f"tool calls: {len(calls) + len(declined)}")
    names = [t.tool for t in calls] + declined
    width = max([14, *(len(visible_controls(n)) for n in names)])  # the longest name
    cut_off = status == INTERRUPTED  # no process runs it: a call in progress was cut off
    for t in calls:
        said = call_status(t.status, t.result, cut_off)
        name = visible_controls(t.tool)
        _say(f"  {name:{width}} {said:12} attempts {t.attempts}  reused {t.reused}")
    for n in declined:
        _say(f"  {visible_controls(n):{width}} {'declined':12} attempts 0  reused 0")
    if cut_off and any(t.status == "in_progress" for t in calls):
        _say(_cut_off_line(sv, run))
    records = [t.tool for t in tools if not is_tool_call(t.tool_key)]
    if records:  # the tool lists and sources the run recorded to be resumed with
        _say(f"recorded: {', '.join(records)}")
    return EXIT_OK


# -- watch -----------------------------------------------------------------


def cmd_watch(ctx: Ctx) -> int:
    """Print a line whenever a run's status or progress changes; with a run
    id, stop when that run ends or fails (exit 1 if it failed or timed out,
    0 if it completed or was canceled; 130 after Ctrl-C, with the command
    that watches again). Polls ``data_version`` every ``--interval`` seconds."""
    sv = ctx.services()
    one = ctx.resolve(sv, ctx.args.run_id) if ctx.args.run_id else None
    # Ctrl-C stops watching (exit 130), never the run; the hint watches again
    ctx.continue_with = "watch" if one is None else f"watch {one.run_id}"
    return _watch(ctx, sv, one)


def _watch(ctx: Ctx, sv: Services, one: Any) -> int:
    seen: dict[str, tuple[Any, ...]] = {}
    version: int | None = None
    while True:
        now_version = sv.checkpoints.data_version()
        if now_version != version:
            version = now_version
            rows = _watch_rows(sv, one)
            for row in rows:
                key = (row["status"], row["progress"], row.get("turns"), row["error"])
                if seen.get(row["run_id"]) != key:
                    seen[row["run_id"]] = key
                    if ctx.args.output != "text":
                        emit_one(ctx.args.output, row)
                        continue
                    prog = progress_text(row["progress"])
                    err = f"  {row['error']}" if row["error"] else ""
                    print(
                        f"{_table_time(row['updated_at'])}  {row['run_id']}  {row['kind']} "
                        f"{row['flow']}  {row['status']}  {prog}{err}",
                        flush=True,
                    )
            if one is not None and rows and rows[0]["status"] in ENDED | FAILED:
                return EXIT_FAILED if rows[0]["status"] in FAILED else EXIT_OK
        time.sleep(ctx.args.interval)


def _watch_rows(sv: Services, one: Any) -> list[dict[str, Any]]:
    now = sv.checkpoints.now()
    if one is not None:
        if one.kind == "agent":
            return [agent_row(sv.agents.get(one.run_id), now)]
        if one.kind == "langgraph":
            from desktop_app.cli import langgraph
            from desktop_app.integrations.langgraph.threads import get_thread

            thread = get_thread(sv.checkpoints, sv.settings.scope, one.run_id)
            return [] if thread is None else [langgraph.thread_row(thread, now)]
        return [flow_row(sv.checkpoints.get_run(one.run_id), now)]
    rows = [flow_row(r, now) for r in sv.checkpoints.list_runs(newest_first=True, limit=200)]
    rows += [agent_row(r, now) for r in sv.agents.list() if not r.parent_run_id]
    from desktop_app.cli import langgraph
    from desktop_app.integrations.langgraph.threads import list_threads

    rows += [langgraph.thread_row(t, now) for t in list_threads(sv.checkpoints, sv.settings.scope)]
    return sorted(rows, key=lambda r: r["updated_at"] or "")


# -- waiting ---------------------------------------------------------------


def _wait_row(w: Any) -> dict[str, Any]:
    return {
        "wait_id": w.wait_id,
        "step_id": w.step_id,
        "kind": w.kind,
        "name": w.name,
        "key": w.key,
        "prompt": w.prompt,
        "created_at": iso(w.created_at),
        "deadline_at": iso(w.deadline_at),
    }


def cmd_waiting(ctx: Ctx) -> int:
    from desktop_app.agent.approvals import (
        agent_wait_id,
        answer_commands,
        ask_command,
        pending_approval,
        render_call,
    )
    from desktop_app.errors import CheckpointCorruptError

    sv = ctx.services()
    engine = sv.engine
    runs = engine.waiting()
    asking = sv.agents.list(statuses=["input_required"])
    # a rate-limited agent run waits for a time, as a flow run's timer does
    limited = [r for r in sv.agents.list(statuses=["rate_limited"]) if not r.parent_run_id]
    now = ctx.judged_now(sv)
    from desktop_app.cli import langgraph

    threads = langgraph.waiting_threads(sv)
    # what db copy moved waits there, not here: listed apart, with where to see it
    kinds: list[tuple[str, list[Any]]] = [
        ("run", list(runs)),
        ("agent run", [*asking, *limited]),
        ("LangGraph thread", list(threads)),
    ]
    gone = [
        (noun, r.run_id, where)
        for noun, rows in kinds
        for r in rows
        if (where := moved_to(r.lease_owner)) is not None
    ]
    moved_ids = {run_id for _, run_id, _ in gone}
    runs = [r for r in runs if r.run_id not in moved_ids]
    asking = [r for r in asking if r.run_id not in moved_ids]
    limited = [r for r in limited if r.run_id not in moved_ids]
    threads = [t for t in threads if t.thread_id not in moved_ids]
    # a run whose checkpoint is damaged is listed with the damage, and the rest go on
    unreadable: dict[str, CheckpointCorruptError] = {}
    run_waits: dict[str, list[Any]] = {}
    for run in runs:
        try:
            run_waits[run.run_id] = engine.waits(run.run_id)
        except CheckpointCorruptError as exc:
            unreadable[run.run_id] = exc
            run_waits[run.run_id] = []
    if ctx.args.output != "text":
        rows = [
            {
                **flow_row(run, now),
                "waits": [_wait_row(w) for w in run_waits[run.run_id]],
                **({"unreadable": str(unreadable[run.run_id])} if run.run_id in unreadable else {}),
                **({"first": why} if (why := unregistered(sv, run)) is not None else {}),
            }
            for run in runs
        ]
        # wait_id: `answer THREAD VALUE --wait-id ID` answers this question only
        rows += [
            {
                **langgraph.thread_row(t, now),
                "wait_id": t.wait_id,
                "command": langgraph.answer_command(ctx, t),
            }
            for t in threads
        ]
        for ar in asking:
            # wait_id: `answer RUN VALUE --wait-id ID` answers this question only
            first = {"wait_id": agent_wait_id(ar.pending_call), "first": agent_blocker(sv, ar)}
            request = pending_approval(ar.pending_call)
            if request is not None:
                approval = {"tool": request.tool, "arguments": dict(request.arguments)}
                row = {**agent_row(ar, now), "question": None, "approval": approval, **first}
                rows.append(row)
                continue
            question = (ar.pending_call or {}).get("arguments", {}).get("question")
            rows.append({**agent_row(ar, now), "question": question, **first})
        rows += [{**agent_row(r, now), "next": agent_next(ctx.hints, r)} for r in limited]
        emit_all(ctx.args.output, rows)
        return EXIT_OK
    if not runs and not asking and not threads and not limited:
        print("no waiting runs")
    for noun, run_id, where in gone:
        print(f"{noun} {one_line(run_id)} {moved_waiting(ctx.hints, where, run_id)}")
    for run in runs:
        print(f"run {run.run_id}  flow {run.flow_name}")
        damaged = unreadable.get(run.run_id)
        if damaged is not None:
            print(f"  unreadable: {visible_controls(str(damaged))}")
            for line in damaged_run_hints(ctx.hints, damaged):
                print(f"  {line}")
            continue
        to_set = unregistered(sv, run)
        if to_set is not None:  # as `show` says it first: nothing below works here before it
            shown = ctx.hints.cmd(f"show {run.run_id}")
            print(f"  first: {to_set}; then `{shown}` says what moves it on")
        stuck = stuck_on_version(sv, run) is not None
        if stuck:
            show = ctx.hints.cmd(f"show {run.run_id}")
            print(f"  stuck: its flow changed since it started; `{show}` says what works")
        if not stuck:
            for line in run_deadline_lines(ctx.hints, run, now, indent="  "):
                print(line)
        waits = run_waits[run.run_id]
        if not waits and run.error:
            hint = ctx.hints.cmd(f"resume {run.run_id}")
            print(f"  paused for an operator: {visible_controls(run.error)}  ({hint})")
        for w in waits:
            what = {
                "input": f"input: {visible_json(w.prompt)}",
                "signal": f"signal {shell_quote(str(w.name))} {shell_quote(str(w.key))}",
                "event": f"event {shell_quote(str(w.name))}",
                "timer": "timer",
            }[w.kind]
            due = (
                ""
                if w.deadline_at is None
                else f"  deadline {due_in(w.deadline_at, now)} ({iso(w.deadline_at)})"
                + (
                    ", after the run's own: it times out first"
                    if after_run_deadline(run, w)
                    else ""
                )
            )
            print(f"  {w.wait_id}  {what}{due}")
            if run_deadline_passed(run, now) and not stuck:
                print(PAST_RUN_DEADLINE)
            elif too_late(w, now) and not stuck:
                for line in too_late_lines(ctx.hints, run.run_id, w, now):
                    print(line)
    for ar in asking:
        print(f"agent run {ar.run_id}  agent {ar.agent}")
        why = agent_blocker(sv, ar)
        if why is not None:
            print(f"  first: {why}; then")
        request = pending_approval(ar.pending_call)
        if request is not None:
            yes, no = answer_commands(ar.run_id, request.key)
            print(f"  approve: {render_call(request.tool, request.arguments)}")
            print(f"    yes: {ctx.hints.cmd(yes)}")
            print(f"    no:  {ctx.hints.cmd(no)}")
            continue
        question = (ar.pending_call or {}).get("arguments", {}).get("question")
        hint = ctx.hints.cmd(ask_command(ar.run_id, agent_wait_id(ar.pending_call)))
        print(f"  asks: {visible_json(question)}  ({hint})")
    for r in limited:
        print(f"agent run {r.run_id}  agent {r.agent}")
        _say(f"  rate_limited: {agent_next(ctx.hints, r)}")
    langgraph.print_waiting(ctx, threads)
    return EXIT_OK


# -- resume / cancel -------------------------------------------------------


def cmd_resume(ctx: Ctx) -> int:
    from desktop_app.bootstrap import parse_database
    from desktop_app.flow import EventBus

    events = EventBus()
    events.subscribe(step_listener(False))
    sv = ctx.services(events=events)
    engine = sv.engine
    if ctx.args.all and ctx.args.onto_current:
        raise InputError("--onto-current moves one run at a time: give its RUN, not --all")
    if ctx.args.all:
        from desktop_app.cli.ask import recover_agents

        report = engine.recover()
        failed = 0
        for run, outcome in report:
            if isinstance(outcome, RunLeasedError):  # a live peer runs it: not a failure
                print(f"run {run.run_id} not resumed here: {outcome}")
                if outcome.moved_to is not None:
                    print(f"  see it there: {moved_hint(ctx.hints, outcome.moved_to, run.run_id)}")
            elif isinstance(outcome, FlowVersionMismatchError):
                failed += 1
                print(f"run {run.run_id} not resumed: {version_refusal(ctx.hints, outcome)}")
            elif isinstance(outcome, BaseException):
                failed += 1
                print(f"run {run.run_id} not resumed: {outcome}")
                for line in damaged_run_hints(ctx.hints, outcome):
                    print(line)
            else:
                failed += outcome.status == "failed"
                print(f"run {run.run_id} {outcome.status}")
        from desktop_app.cli import langgraph
        from desktop_app.integrations.langgraph.threads import resume_hint

        agent_runs, agents_failed = recover_agents(sv, hints=ctx.hints)
        threads = langgraph.interrupted_threads(sv)
        if not report and not agent_runs:
            where = parse_database(sv.database).shown
            scope = f"(scope {sv.settings.scope!r})"
            if threads:  # interrupted runs there are: LangGraph threads, which it leaves
                print(f"no interrupted flow or agent runs in {where} {scope}; only LangGraph:")
            else:
                print(f"no interrupted runs in {where} {scope}")
        for t in threads:  # shown interrupted too, but only their program runs them
            print(
                f"langgraph thread {one_line(t.thread_id)} is interrupted; Flowdesk does not run "
                f"LangGraph graphs: its program continues it with {resume_hint(t.thread_id)}"
            )
        _deliver(engine)
        return EXIT_FAILED if failed or agents_failed else EXIT_OK
    ref = ctx.resolve(sv, ctx.args.run_id)
    if ref.kind == "langgraph":
        from desktop_app.cli.langgraph import not_for_threads

        raise not_for_threads(ref.run_id, "resume")
    ctx.current_run = ref.run_id  # Ctrl-C from here on names this run
    if ctx.args.onto_current:
        return _resume_onto_current(ctx, sv, ref)
    if ref.kind == "agent":
        from desktop_app.cli.ask import resume_agent_run

        return resume_agent_run(ctx, sv, ref.run_id, answer=None)
    from desktop_app.cli.start import report_result

    ctx.current_run = ref.run_id
    refuse_unregistered(ctx, sv, ref.run_id, "resumed")
    try:
        result = engine.resume(ref.run_id)
    except RunStateError as exc:
        status = engine.status(ref.run_id).status
        if status in ("canceled", "timed_out"):
            rid = ref.run_id
            raise RunStateError(
                f"{exc} From its start: `{ctx.hints.cmd(f'replay {rid}')}`; from one of "
                f"its checkpoints (RUN:REVISION, as `{ctx.hints.cmd(f'show {rid}')}` lists "
                "them): replay or fork that"
            ) from exc
        if status != "waiting":
            raise
        # it waits for a person's answer (`answer` continues it): report it waiting
        result = engine.wake(ref.run_id)
    try:
        _deliver(engine)
    except DiskFullError:
        from desktop_app.cli.start import note_if_completed

        note_if_completed(ctx, sv, result.run_id)
        raise
    return report_result(ctx, result, sv)


def _resume_onto_current(ctx: Ctx, sv: Services, ref: Any) -> int:
    """``resume RUN --onto-current``: continue flow run ``ref`` (its flow
    changed since it started) as a new run of the registered version, as the
    app's launch report does (``Engine.fork_onto_current``); the run itself
    is canceled as superseded. Prints both runs, then the new run's outcome.

    Raises:
        InputError: not a live flow run, or its flow did not change (plain
            ``resume`` goes on with it).
        FlowError: a live process holds the run (it has the old code and
            runs it), or the new version cannot take it: its state no longer
            fits the state model, or the step it stopped at is gone; nothing
            changed then, and ``cancel`` ends it.
    """
    from desktop_app.cli.start import report_result
    from desktop_app.errors import CheckpointDecodeError, FlowError, RunStateError
    from desktop_app.flow.owners import holding

    rid = ref.run_id
    if ref.kind != "flow":
        raise InputError(
            f"--onto-current is for flow runs whose flow changed since they started; "
            f"{rid} is {'an agent run' if ref.kind == 'agent' else 'a LangGraph thread'}"
        )
    run = sv.checkpoints.get_run(rid)
    if run.status not in ("pending", "running", "waiting", "failed"):
        raise InputError(
            f"run {rid} is {run.status}: only a live run (pending, running, waiting or "
            f"failed) moves onto a new version of its flow; what it did: "
            f"`{ctx.hints.cmd(f'show {rid}')}`"
        )
    if stuck_on_version(sv, run) is None:
        raise InputError(
            f"run {rid} runs under its flow as registered here (version {run.flow_version}, "
            f"status {run.status}): nothing to move onto; go on with it with "
            f"`{ctx.hints.cmd(f'resume {rid}')}`"
        )
    now = sv.checkpoints.now()
    if holding(run.lease_owner, run.lease_expires_at, now) == "held":
        raise FlowError(
            f"run {rid} is held by a live process ({run.lease_owner}), which has its flow's "
            "earlier code and runs it: leave it to that process, or stop that process and "
            "try again"
        )
    engine = sv.engine
    current = engine.flow(run.flow_name).version

    def created(new_id: str) -> None:  # said before the new run's steps run
        print(f"run {rid} canceled: superseded by run {new_id} on version {current}")
        print(new_id, flush=True)

    try:
        _say_state_moved(sv, engine.flow(run.flow_name).state_type, rid, current)
        result = engine.fork_onto_current(rid, on_created=created)
    except (CheckpointDecodeError, RunStateError) as exc:
        raise FlowError(
            f"run {rid} cannot continue on {run.flow_name} version {current}: "
            f"{str(exc).rstrip('.')}. Nothing changed; to end it: "
            f"`{ctx.hints.cmd(f'cancel {rid}')}`"
        ) from exc
    _deliver(engine)
    return report_result(ctx, result, sv)


def _say_state_moved(sv: Services, model: Any, rid: str, version: str) -> None:
    """On stderr, what moving run ``rid``'s state onto ``model`` does to its
    fields (``state.upgraded_state``): each one added, given its default,
    and each one left out.

    Raises:
        CheckpointDecodeError: as ``upgraded_state`` (nothing changed).
    """
    from desktop_app.flow.state import upgraded_state

    cp = sv.checkpoints.latest(rid)
    _, defaults, dropped = upgraded_state(model, cp.state, rid, cp.revision)
    for name, value in defaults.items():
        shown = visible_controls(repr(value))
        print(
            f"field {name!r} is new in version {version}: given its default {shown}",
            file=sys.stderr,
        )
    for name in dropped:
        print(
            f"field {name!r} is not in version {version}: left out (run {rid}'s checkpoints "
            "keep it)",
            file=sys.stderr,
        )


def _deliver(engine: Any) -> None:
    """Deliver the outbox intents the resumed runs queued (and any a killed
    process left), as ``answer`` does, and say how many."""
    from desktop_app.cli.admin import deliver_outbox

    delivered = deliver_outbox(engine)
    if delivered:
        print(f"{plural(delivered, 'outbox intent')} delivered")


def cmd_cancel(ctx: Ctx) -> int:
    sv = ctx.services()
    ref = ctx.resolve(sv, ctx.args.run_id)
    if ref.kind == "langgraph":
        from desktop_app.cli.langgraph import not_for_threads

        raise not_for_threads(ref.run_id, "cancel")
    if ref.kind == "agent":
        from desktop_app.cli.ask import agent_for

        agent_for(sv, sv.agents.get(ref.run_id).agent).cancel(ref.run_id)
        print(f"agent run {ref.run_id} {sv.agents.get(ref.run_id).status}")
        executing = agent_executor(sv, ref.run_id)
        if executing is not None:
            print(executing)
        return EXIT_OK
    from desktop_app.runs_view import flow_executor_text, withdrawn_text

    executing = flow_executor_text(sv.checkpoints, ref.run_id, sv.checkpoints.now())
    try:
        done = sv.engine.cancel_withdrawing(ref.run_id)
    except RunStateError as exc:  # ended: its side effects still queued are withdrawn
        try:
            done = sv.engine.withdraw_after_end(ref.run_id)
        except RunStateError:
            raise exc from None
        print(ended_cancel_text(ctx, done))
        # nothing withdrawn nor settled: only side effects a live process is making
        return EXIT_OK if done.withdrawn or done.made or done.unknown else EXIT_FAILED
    run = done.run
    said = [withdrawn_text(run.flow_name, len(done.withdrawn), len(done.made), len(done.unknown))]
    if done.in_flight:
        said.append(f"{len(done.in_flight):,} being delivered now (left to its dispatcher)")
    print(f"run {run.run_id} {run.status}" + "".join(f"; {t}" for t in said if t))
    if executing is not None and run.status == "canceled":
        print(executing)
    return EXIT_OK


def ended_cancel_text(ctx: Ctx, done: Any) -> str:
    """What ``cancel`` did to a run that had already ended (``done``, what
    :meth:`~desktop_app.flow.engine.Engine.withdraw_after_end` did) with
    side effects still queued: the status it keeps, what was withdrawn or
    settled, what is left and why, and for tidy the ``undo`` that moves back
    the moves made."""
    from desktop_app.runs_view import ended_withdrawn_text

    run = done.run
    text = f"run {run.run_id} " + ended_withdrawn_text(
        run.flow_name,
        run.status,
        len(done.withdrawn),
        len(done.made),
        len(done.unknown),
        len(done.in_flight),
    )
    if run.flow_name == "tidy":
        text += f"; `{ctx.hints.cmd(f'undo {run.run_id}')}` moves back the files it moved"
    return text


def agent_executor(sv: Services, run_id: str) -> str | None:
    """What the process executing agent run ``run_id`` does about its cancel
    (:func:`~desktop_app.runs_view.agent_executor_text`, which the app's
    ``c`` says too), or ``None`` when none executes it."""
    from desktop_app.runs_view import agent_executor_text

    return agent_executor_text(sv.agents, run_id, sv.checkpoints.now())


def cmd_undo(ctx: Ctx) -> int:
    """``flowdesk undo RUN``: withdraw a tidy run's moves not made yet, then
    move its moved files back (exit 1 when a file could not go back, or its
    move was in flight, each listed with why; files already back, withdrawn
    moves and moves never made (the file vanished before it, or its target
    existed) are reported, not failures; exit 0 with "nothing to undo" when
    the run moved nothing)."""
    from desktop_app.flows.tidy_undo import (
        NothingToUndo,
        UndoneElsewhere,
        UndoUnderWay,
        undo_summary,
        undo_tidy_run,
    )

    sv = ctx.services()
    ref = ctx.resolve(sv, ctx.args.run_id)
    ctx.continue_with = f"undo {ref.run_id}"  # Ctrl-C: the undo goes on with it
    again = ctx.hints.cmd(f"undo {ref.run_id}")
    try:
        report = undo_tidy_run(sv.checkpoints, ref.run_id, wait_s=ctx.args.wait)
    except UndoneElsewhere as exc:  # its moves are made there: the undo that works
        there = ctx.hints.cmd(f"undo {ref.run_id}", db=exc.moved_to)
        print(f"flowdesk: {exc}\nundo it there: {there}", file=sys.stderr)
        return EXIT_FAILED
    except UndoUnderWay as exc:  # the other undo moves the files: the command for after it
        print(f"flowdesk: {exc} (`{again}`)", file=sys.stderr)
        return EXIT_FAILED
    except NothingToUndo as exc:  # not bad input: the folder is as it was already
        if ctx.args.output != "text":
            emit_one(ctx.args.output, {"run_id": ref.run_id, "moved_back": 0, "nothing": str(exc)})
        else:
            print(exc)
        return EXIT_OK
    if ctx.args.output != "text":
        emit_one(
            ctx.args.output,
            {
                "run_id": ref.run_id,
                "moved_back": report.moved_back,
                "already_back": report.already_back,
                "withdrawn": report.withdrawn,
                "in_flight": report.in_flight,
                "never_moved": report.never_moved,
                "left": report.left,
                "folders_removed": report.folders_removed,
                "folders_kept": report.folders_kept,
                "waited_for": report.waited_for,
                "took_over": report.took_over,
            },
        )
    else:
        print(f"tidy run {ref.run_id}: {undo_summary(report)}")
        if report.took_over is not None:
            print(
                f"  took over from an undo whose process stopped ({report.took_over}): "
                "every file was looked up where it is"
            )
        if report.waited_for is not None:
            print(
                f"  another undo of this run ({report.waited_for}) was under way: waited "
                "for it to end; the files it moved back are counted already back"
            )
        for line in report.never_moved:
            print(f"  {line}")
        for line in [*report.in_flight, *report.left]:
            print(f"  left {line}")
        for folder in report.folders_removed:
            print(f"  removed empty folder {folder}")
        for folder in report.folders_kept:
            print(f"  kept folder {folder} (it holds other files)")
        if report.left or report.in_flight:
            print(f"then `{again}` moves back what is left")
    return EXIT_FAILED if report.left or report.in_flight else EXIT_OK
