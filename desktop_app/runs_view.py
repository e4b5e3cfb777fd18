"""Flow runs and agent runs as one list, for the CLI (``flowdesk runs``) and the app.

The one place three things are decided:

* :data:`AGENT_AS_FLOW_STATUS`: an agent run's status in the flow-run
  vocabulary (``done`` → ``completed``, ``timeout`` → ``timed_out``,
  ``input_required`` → ``waiting``); the agent-only statuses
  (``paused``, ``rate_limited``, ``expired``) are shown as they are.
* :func:`merged_page`: one page of both kinds, newest first
  (``created_at``, then run id, descending), read with bounded flow-run
  reads whatever the page number: the flow-run offset is moved back by at
  most the number of agent runs, which are few and read in full.
* :func:`display_status`: the status a run is shown with, which is its
  stored status unless nothing executes it any more (``interrupted``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from desktop_app.errors import (
    ENDED_RUN_STATUSES,
    CheckpointDecodeError,
    CheckpointNotFoundError,
    moved_to,
)
from desktop_app.flow.owners import holding, lease_abandoned
from desktop_app.process_state import STOPPED, stopped_pid
from desktop_app.textsafe import quoted, visible_controls
from desktop_app.words import plural

#: agent statuses in the flow vocabulary (a status not listed is shown as it is)
AGENT_AS_FLOW_STATUS = {"done": "completed", "timeout": "timed_out", "input_required": "waiting"}


def no_signal_waiter(name: str, key: str) -> str:
    """What the CLI's ``signal`` and the app say when a signal they stored
    reaches no waiting run (a misspelt name or key is stored too)."""
    return (
        f"no run waits for signal {quoted(name)} with key {quoted(key)} now; it is kept for the "
        "first run that waits for it"
    )


def signal_waits(store: Any, name: str, key: str) -> dict[str, str]:
    """The pending waits for signal ``(name, key)`` now, ``{wait_id:
    run_id}``, in the order ``runs_waiting_for`` gives the runs: read
    before a signal is sent, so :func:`signal_reach` can say which run
    took it."""
    waits: dict[str, str] = {}
    for run_id in store.runs_waiting_for("signal", name, key):
        try:
            cp = store.latest(run_id)
        except CheckpointDecodeError:  # damaged: it cannot take it (SignalReach.damaged)
            continue
        for w in cp.waits:
            if (w.kind, w.name, w.key) == ("signal", name, key):
                waits[w.wait_id] = run_id
    return waits


@dataclass(frozen=True, slots=True)
class SignalReach:
    """Which run a signal reached, read from the store right after it was
    sent (one signal is taken by one wait, as a Temporal signal goes to
    one workflow execution).

    Attributes:
        taken_by: the run whose wait took it, or ``None`` (it waits in the mailbox).
        refused: why that wait refused it (its payload did not fit), or ``None``.
        still_waiting: the runs that wait for ``(name, key)`` now, the one
            that took it left out: another signal is needed for each.
        damaged: the runs that wait for it too but whose checkpoint cannot
            be read (changed or deleted outside Flowdesk): they cannot take
            it, and ``show`` says what works on each.
    """

    taken_by: str | None
    refused: str | None
    still_waiting: tuple[str, ...]
    damaged: tuple[str, ...] = ()


def signal_reach(
    store: Any, signal_id: int, name: str, key: str, before: dict[str, str]
) -> SignalReach:
    """What became of signal ``signal_id`` (``before``: :func:`signal_waits`
    read before it was sent)."""
    wait_id = store.signal_consumer(signal_id)
    taken_by = refused = None
    if wait_id is not None:
        taken_by = before.get(wait_id) or wait_id.rsplit(":", 2)[0]
        try:
            entries = store.latest(taken_by).meta.get("refused_signals", [])
        except CheckpointNotFoundError:  # it took it and completed: its flow deletes such runs
            entries = []
        refused = next((r["reason"] for r in entries if r["signal"] == signal_id), None)
    waiting = store.runs_waiting_for("signal", name, key)
    damaged = []
    for run_id in waiting:
        try:
            store.latest(run_id)
        except CheckpointDecodeError:
            damaged.append(run_id)
    still = tuple(r for r in waiting if (r != taken_by or refused) and r not in damaged)
    return SignalReach(taken_by, refused, still, tuple(damaged))


#: what a flow's outbox intents are, for "completed · 2,941 moves queued"
INTENT_NOUNS = {"tidy": ("move", "moves")}


def queued_text(flow_name: str, undelivered: int) -> str:
    """``"2,941 moves queued"``: a run's side effects not delivered yet
    (outbox intents ``pending`` or ``sending``), or ``""`` when none are, so a
    run shown ``completed`` is not taken for done while its effects wait."""
    if not undelivered:
        return ""
    one, many = INTENT_NOUNS.get(flow_name, ("side effect", "side effects"))
    return f"{plural(undelivered, one, many)} queued"


#: why an intent ``sending`` may have been made (``show`` and the app say it)
MAY_HAVE_BEEN_MADE = (
    "its sending began and its outcome was not recorded (its process stopped, or the "
    "call failed midway); the outcome is unknown until it is delivered or looked up, "
    "and it is sent again only with the same idempotency key"
)


def unsettled_text(flow_name: str, sending: int) -> str:
    """``"1 move may have been made"``: a run's outbox intents ``sending``
    (their send began, possibly by a process that died, and its end was not
    recorded: each may have been made), or ``""`` when none are. Never called
    queued: a queued one was not made yet."""
    if not sending:
        return ""
    one, many = INTENT_NOUNS.get(flow_name, ("side effect", "side effects"))
    return f"{plural(sending, one, many)} may have been made"


def sending_split(
    claims: Mapping[str, tuple[str | None, float | None]], now: float
) -> tuple[dict[str, int], int]:
    """A run's intents ``sending`` (``Outbox.sending_claims``), split by
    whether a live dispatcher is making them, at ``now`` (UTC epoch s, the
    store's clock): ``(being_made, unknown)``, the owner id (``host:pid:nonce``)
    -> how many that process is making now (its claim held:
    :func:`~desktop_app.flow.owners.holding`, the one rule of leases and
    claims), and how many whose claimant is gone or let go (their outcome is
    unknown until delivered or looked up)."""
    being_made: dict[str, int] = {}
    unknown = 0
    for owner, until in claims.values():
        if owner is not None and claim_is_live(owner, until, now):
            being_made[owner] = being_made.get(owner, 0) + 1
        else:
            unknown += 1
    return being_made, unknown


def claim_is_live(owner: str, until: float | None, now: float) -> bool:
    """Whether the dispatcher ``owner`` still makes the intent it claimed
    until ``until`` (UTC epoch s), judged at ``now``: its claim is held
    (:func:`~desktop_app.flow.owners.holding`: a process of this host that
    runs, whatever the clocks; another host's until its claim runs out) and
    it is not gone (:func:`~desktop_app.flow.outbox.claimant_is_gone`: this
    very process with no live dispatcher of that owner)."""
    from desktop_app.flow.outbox import claimant_is_gone

    return holding(owner, until, now) == "held" and not claimant_is_gone(owner)


def making_text(flow_name: str, being_made: Mapping[str, int]) -> str:
    """``"1 move being made now by process 4242 on host box"``: a run's
    intents ``sending`` whose dispatcher is alive (:func:`sending_split`),
    or ``""`` when there are none. Not "may have been made": their process
    runs, and records each outcome when its send ends."""
    one, many = INTENT_NOUNS.get(flow_name, ("side effect", "side effects"))
    return "; ".join(
        f"{plural(n, one, many)} being made now by {process_text(owner)}"
        for owner, n in sorted(being_made.items())
    )


def process_text(owner: str) -> str:
    """``"process 4242 on host box"`` for owner id ``box:4242:ab12cd@…``
    (:func:`~desktop_app.flow.owners.new_owner`); ``"dispatcher <owner>"``
    for an id of another form."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    return f"process {pid} on host {host}" if pid.isdigit() else f"dispatcher {owner}"


def processes_text(being_made: Mapping[str, int]) -> str:
    """:func:`process_text` of each owner of ``being_made``, joined with "and"."""
    return " and ".join(process_text(owner) for owner in sorted(being_made))


#: what a move being made by a live process waits for (``show`` says it)
BEING_MADE = "its outcome is recorded when that process ends the send"


def withdrawn_text(flow_name: str, withdrawn: int, made: int = 0, unknown: int = 0) -> str:
    """``"596 queued moves withdrawn (never made)"``: the side effects a
    cancel took back before delivery, then those whose process had died
    mid-send: ``made`` (their destination has them) and ``unknown`` (no
    way to check here); ``""`` when there are none of any."""
    one, many = INTENT_NOUNS.get(flow_name, ("side effect", "side effects"))
    said = []
    if withdrawn:
        said.append(
            f"{plural(withdrawn, f'queued {one}', f'queued {many}')} withdrawn (never made)"
        )
    if made:
        said.append(
            f"{plural(made, one, many)} made before the process making "
            f"{'it' if made == 1 else 'them'} stopped (recorded as made)"
        )
    if unknown:
        said.append(
            f"{plural(unknown, one, many)} whose outcome is unknown: the process making "
            f"{'it' if unknown == 1 else 'them'} stopped mid-way, and "
            f"{'it is' if unknown == 1 else 'they are'} never made again"
        )
    return "; ".join(said)


def ended_withdrawn_text(
    flow_name: str, status: str, withdrawn: int, made: int, unknown: int, in_flight: int
) -> str:
    """What a cancel of a run that had already ended ``status`` did to the
    side effects it still had queued (``Engine.withdraw_after_end``; the CLI
    and the app say it): ``"is already completed (it stays completed); 698
    queued moves withdrawn (never made)"``, then those a live process is
    delivering, left to it."""
    one, many = INTENT_NOUNS.get(flow_name, ("side effect", "side effects"))
    took = withdrawn_text(flow_name, withdrawn, made, unknown)
    text = f"is already {status} (it stays {status}); " + (
        took if took else f"no queued {many} withdrawn"
    )
    if in_flight:
        text += (
            f"; left: {plural(in_flight, one, many)} a live process is delivering now "
            f"({'its' if in_flight == 1 else 'their'} outcome is recorded as "
            f"{'it ends' if in_flight == 1 else 'they end'})"
        )
    return text


#: shown statuses (both vocabularies) of runs that never change again
ENDED = ENDED_RUN_STATUSES


def row_actions(status: str) -> frozenset[str]:
    """Which of ``"resume"``, ``"answer"`` and ``"cancel"`` apply to a run
    shown with ``status`` (:func:`display_status`, either vocabulary), for
    the keys a screen offers: an ended run none, a waiting one answer,
    resume (a due timer) and cancel, a live running one cancel, any other (pending, interrupted,
    failed, paused) resume and cancel; a moved one none (``db copy`` moved it)."""
    if status in ENDED or status == MOVED:  # a moved run: nothing acts on it here
        return frozenset()
    if status in ("waiting", "input_required"):  # resume fires a due timer
        return frozenset({"answer", "resume", "cancel"})
    if status == "running":  # a live process executes it
        return frozenset({"cancel"})
    return frozenset({"resume", "cancel"})


class AgentCallsLog(Protocol):
    """What :func:`agent_executor_text` reads of an agent-run log."""

    def get(self, run_id: str) -> Any: ...

    def tool_results(self, run_id: str) -> Sequence[Any]: ...


def agent_executor_text(agents: AgentCallsLog, run_id: str, now: float) -> str | None:
    """What the process executing agent run ``run_id`` does about a cancel
    of it (a live process holds its lease), or ``None`` when none executes
    it: it stops before its next model or tool call; a tool call it has in
    flight runs to its end (what it does stays done) and nothing after it
    runs. What ``flowdesk cancel`` prints and the app's ``c`` says.

    Args:
        agents: the agent-run log (``get``, ``tool_results``).
        run_id: the agent run's full id.
        now: UTC epoch seconds by the store's clock (leases are judged by it).

    Raises:
        CheckpointNotFoundError: no such run.
    """
    from desktop_app.agent.tools import is_tool_call

    run = agents.get(run_id)
    if holding(run.lease_owner, run.lease_expires_at, now) != "held":
        return None
    said = f"the process executing it ({run.lease_owner}) stops before its next model or tool call"
    flying = [
        r.tool
        for r in agents.tool_results(run_id)
        if r.status == "in_progress" and is_tool_call(r.tool_key)
    ]
    if flying:
        said += (
            f"; its call to {visible_controls(', '.join(flying))} is in flight: that call runs "
            "to its end (what it does stays done, its result is recorded) and nothing after it "
            "runs"
        )
    return said


def flow_executor_text(store: Any, run_id: str, now: float) -> str | None:
    """What the process executing flow run ``run_id`` does about a cancel of
    it (a live process holds its lease), or ``None`` when none executes it:
    it stops before its next step; a step it has in flight runs to its end
    (what it does stays done) and nothing after it runs; a stopped process
    (Ctrl-Z) does that once it is continued. Read before the cancel.

    Args:
        store: the checkpoint store (``get_run``, ``latest``).
        run_id: the flow run's full id.
        now: UTC epoch seconds by the store's clock (leases are judged by it).
    """
    run = store.get_run(run_id)
    owner = run.lease_owner
    if owner is None or holding(owner, run.lease_expires_at, now) != "held":
        return None
    said = f"the process executing it ({owner}) stops before its next step"
    try:
        steps = store.latest(run_id).steps
    except CheckpointDecodeError:  # damaged: its steps cannot be read
        steps = {}
    flying = [sid for sid, rec in steps.items() if rec.status == "in_progress"]
    if flying:
        said += (
            f"; its step {visible_controls(', '.join(flying))} is in flight: it runs to its "
            "end (what it does stays done) and nothing after it runs"
        )
    if (pid := stopped_pid(owner)) is not None:
        said += f"; that process is {STOPPED.format(pid=pid)}, and does so once it goes on"
    return said


def stopped_holder(run: Leased) -> int | None:
    """The pid of ``run``'s lease holder when the run is ``running`` or
    ``pending`` and that holder is a process of this host that is stopped
    (SIGSTOP or Ctrl-Z): it holds the run and runs nothing until it is
    continued, so ``running`` alone would say the run moves on. ``None``
    otherwise (no holder, a running one, another host's, or no ``/proc``
    to tell). Never raises; it reads no database."""
    owner = run.lease_owner
    if run.status not in ("running", "pending") or owner is None:
        return None
    return stopped_pid(owner)


def stopped_holder_words(pid: int) -> str:
    """What a run says of its stopped lease holder ``pid``
    (:func:`stopped_holder`), with the command that lets it go on."""
    return f"its process {pid} runs nothing now: it is {STOPPED.format(pid=pid)}"


#: who delivers a side effect ``db copy`` moved, on the database it moved to
MOVED_DELIVERY = "a worker for the built-in destinations, your program's for its own"


def holder_words(owner: str) -> str:
    """A lease or claim owner (``host:pid:tag``) as a person reads it:
    ``process 1234 on host laptop (owner laptop:1234:ab12cd@99)``."""
    host, _, rest = owner.partition(":")
    return f"process {rest.partition(':')[0]} on host {host} (owner {owner})"


def agent_status_words(status: str) -> str:
    """An agent run's status (:func:`display_status`) for a sentence, in the
    words the runs table shows (``done`` → ``completed``, ``timeout`` →
    ``timed out``, ``input_required`` → ``waiting``, ``rate_limited`` →
    ``rate limited``)."""
    return agent_status_as_flow(status).replace("_", " ")


def agent_status_as_flow(status: str) -> str:
    """An agent run's status as a flow run's (``done`` → ``completed``...)."""
    return AGENT_AS_FLOW_STATUS.get(status, status)


#: the status shown for a run that should be executing but that no process executes
INTERRUPTED = "interrupted"
#: the status shown in a SQLite file for an unfinished run ``db copy`` moved
#: to PostgreSQL: its workers there execute it, nothing on the file does
MOVED = "moved"


class Leased(Protocol):
    """A run of either kind: what judging its liveness needs."""

    @property
    def status(self) -> str: ...

    @property
    def lease_owner(self) -> str | None: ...

    @property
    def lease_expires_at(self) -> float | None: ...


def display_status(run: Leased, now: float) -> str:
    """The status to show for ``run`` (a flow run or an agent run; an agent
    run's own vocabulary is kept): its stored status, or ``"interrupted"``
    when the run should be executing and no process executes it, which is:

    * ``running`` with no lease owner: its process stopped and let go of it
      (Ctrl-C, a full disk);
    * ``running``, or ``pending`` with a lease owner, whose owner is a
      process of this host that is gone or a zombie
      (:func:`~desktop_app.flow.owners.owner_is_dead`: ``kill -9``);
    * the same whose lease expired (``lease_expires_at <= now``), unless
      the owner is a live process of this host: its lease may run late,
      it still executes the run.

    Args:
        run: a ``RunRecord`` or an ``AgentRun`` (anything with ``status``,
            ``lease_owner`` and ``lease_expires_at``).
        now: UTC epoch seconds by the store's clock (what leases are
            decided by: the database's on PostgreSQL).

    A run ``db copy`` moved to PostgreSQL (its lease owner ``moved to
    URL``) that has not ended shows :data:`MOVED`.

    Returns:
        ``run.status``, :data:`INTERRUPTED` or :data:`MOVED`. Never raises;
        it reads no database (it asks the operating system whether a local
        owner lives).
    """
    owner = run.lease_owner
    if run.status not in ENDED and moved_to(owner) is not None:
        return MOVED
    if run.status == "running" and owner is None:
        return INTERRUPTED
    if run.status not in ("running", "pending") or owner is None:
        return run.status
    return INTERRUPTED if lease_abandoned(owner, run.lease_expires_at, now) else run.status


def left_over(run: Leased, now: float) -> bool:
    """Whether launch recovery would take ``run``: ``pending`` or ``running``
    and no live process holds its lease (a run started and never claimed
    counts, unlike for :func:`display_status`). Never raises."""
    if run.status not in ("pending", "running"):
        return False
    return lease_abandoned(run.lease_owner, run.lease_expires_at, now)


class Dated(Protocol):
    """A run of either kind: what ordering needs."""

    @property
    def run_id(self) -> str: ...

    @property
    def created_at(self) -> float: ...


F = TypeVar("F", bound=Dated)
A = TypeVar("A", bound=Dated)


def _key(run: Dated) -> tuple[float, str]:
    return (run.created_at, run.run_id)


def merged_page(
    read_flows: Callable[[int, int], Sequence[F]],
    agents: Sequence[A],
    *,
    offset: int,
    size: int,
) -> tuple[list[F | A], bool]:
    """Rows ``offset`` to ``offset + size`` of flow runs and agent runs merged
    newest first, and whether more rows follow.

    Args:
        read_flows: ``(offset, limit) -> flow runs`` newest first (one bounded
            ``list_runs`` with the caller's filters).
        agents: every agent run that passes the caller's filters, any order.
        offset / size: the page (rows, ``offset >= 0``, ``size >= 1``).

    It reads at most ``min(offset, len(agents)) + size + 2`` flow runs: the
    merged position of a row is the number of rows newer than it, so the
    first ``offset - len(agents)`` flow runs are certainly before the page.
    """
    if not agents:  # flow runs only: one read of the page and one row more
        flows = list(read_flows(offset, size + 1))
        return list(flows[:size]), len(flows) > size
    newest = sorted(agents, key=_key, reverse=True)
    skip = max(0, offset - len(newest))
    if skip:
        # the last skipped flow run: agent runs newer than it are before the page
        got = list(read_flows(skip - 1, min(offset, len(newest)) + size + 2))
        if not got:
            return [], False
        boundary, flows = _key(got[0]), got[1:]
        older = [a for a in newest if _key(a) < boundary]
        before = skip + len(newest) - len(older)  # rows certainly before the page
        newest = older
    else:
        flows = list(read_flows(0, offset + size + 1))
        before = 0
    rows: list[Any] = sorted([*flows, *newest], key=_key, reverse=True)
    start = offset - before
    return rows[start : start + size], len(rows) > start + size


def steps_run_again(history: Sequence[Any], revision: int) -> list[str]:
    """The steps a replay (or fork) from ``revision`` executes again: those
    the run took after it (``history``: its :class:`CheckpointInfo` list),
    in the order it first took them. What they did (files moved or
    written, messages sent) is done again by the new run."""
    return list(dict.fromkeys(h.step_id for h in history if h.revision > revision and h.step_id))


def steps_in_order(steps: Mapping[str, Any]) -> list[Any]:
    """A checkpoint's step records (``Checkpoint.steps``) in the order the
    run first took them (``started_at``; a step not begun last), as
    ``show`` and the app list them: a checkpoint re-written whole (after
    ``keep_last_n`` pruned the ones before it, or moved onto a new flow
    version) holds them in another order (a tryout: alphabetical)."""
    return sorted(steps.values(), key=lambda rec: (rec.started_at is None, rec.started_at or 0.0))
