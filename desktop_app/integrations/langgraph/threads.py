"""LangGraph threads as Flowdesk shows them: the thread rows the saver keeps,
read through the store's :class:`~desktop_app.store.protocol.DomainStore`
seam, without importing LangGraph (``flowdesk runs`` lists threads on a
machine where the extra is not installed).

The saver (:mod:`.saver`) writes the rows; this module reads them and writes
one thing itself: a person's answer to an interrupt
(:func:`store_answer`), stored as the pending write LangGraph's
``Command(resume=value)`` stores, so the graph's next
``invoke(None, config)`` hands it to the waiting ``interrupt()``.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from desktop_app.errors import (
    InputError,
    RunStateError,
    ThreadCorruptError,
    ThreadMovedError,
    UnknownRunError,
    moved_to,
)
from desktop_app.store.protocol import DomainStore, SqlTx
from desktop_app.textsafe import one_line, python_literal

#: the run kind threads have in ``flowdesk runs`` and the app
KIND = "langgraph"
#: LangGraph's ids and channel names (langgraph.constants / checkpoint.serde.types),
#: copied so that answering needs no LangGraph import
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
RESUME = "__resume__"
INTERRUPT = "__interrupt__"
ERROR = "__error__"  # a task's exception (LangGraph's private constant)
#: written beside ERROR when a node's error handler takes the exception
ERROR_SOURCE_NODE = "__error_source_node__"
#: ``WRITES_IDX_MAP[RESUME]`` of langgraph.checkpoint.base
RESUME_IDX = -4


def checksum(*parts: str | bytes | int | None) -> str:
    """BLAKE2b-128 (hex) of a row's encoded values, written with the row and
    compared when it is read (as Flowdesk's own checkpoint rows). Keys that a
    copy to another thread changes (scope, thread id) are left out."""
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = (
            b"\x00null" if part is None else part if isinstance(part, bytes) else str(part).encode()
        )
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


#: the columns of a ``langgraph_checkpoints`` row :func:`verify_checkpoint` checks
CHECKPOINT_COLUMNS = (
    "checkpoint_ns, checkpoint_id, parent_id, type, checkpoint, metadata_type, metadata, checksum"
)


def verify_checkpoint(thread_id: str, row: Sequence[Any]) -> None:
    """Check a ``langgraph_checkpoints`` row read as :data:`CHECKPOINT_COLUMNS`
    against the checksum written with it.

    Raises:
        ThreadCorruptError: its bytes changed since they were written.
    """
    _, checkpoint_id, parent_id, cp_type, cp_bytes, md_type, md_bytes, sum_ = row
    encoded = [b"" if value is None else bytes(value) for value in (cp_bytes, md_bytes)]
    if checksum(checkpoint_id, parent_id, cp_type, encoded[0], md_type, encoded[1]) != sum_:
        raise ThreadCorruptError(thread_id, f"checkpoint {checkpoint_id}")


#: the status of a thread whose interrupt a person answered through Flowdesk
#: and whose program has not run the graph since (never a Flowdesk run's)
ANSWERED = "answered"
#: the status of a thread whose node raised and was not handled (its invoke
#: raised the exception); its program's next invoke runs the node again
FAILED = "failed"


@dataclass(frozen=True)
class Thread:
    """One LangGraph thread (a row of ``langgraph_threads``).

    Attributes:
        thread_id: LangGraph's ``thread_id``; the run id Flowdesk shows.
        status: ``running`` (a step is scheduled), ``waiting`` (an interrupt
            is unanswered), ``answered`` (a person's answer is stored and the
            thread's program has not run the graph since: it goes on when
            it does, see :func:`resume_hint`), ``failed`` (a node raised and
            its invoke raised the exception: its program's next invoke runs
            that node again) or ``completed``.
        created_at / updated_at: UTC epoch seconds.
        owner: the process that last wrote it while running
            (``host:pid:nonce@start``), else ``None``.
        context: the ExecutionContext ids (tenant, user, session, run,
            trace, correlation) stored when the thread began.
        interrupts: the unanswered interrupts' values (JSON), oldest first.
        checkpoint_id: its latest root checkpoint.
        interrupt_ids: LangGraph's ids of those interrupts (``Interrupt.id``,
            the keys of ``Command(resume={id: value})``), in the same order;
            empty for a row stored before Flowdesk kept them.
    """

    thread_id: str
    status: str
    created_at: float
    updated_at: float
    owner: str | None
    context: dict[str, Any] = field(default_factory=dict)
    interrupts: list[Any] = field(default_factory=list)
    checkpoint_id: str | None = None
    interrupt_ids: list[str] = field(default_factory=list)

    @property
    def wait_id(self) -> str | None:
        """What names the question a waiting thread asks (``--wait-id``):
        the id of its one unanswered interrupt. One node that calls
        ``interrupt()`` twice asks both at one checkpoint, so the checkpoint
        id alone would let an answer to the first be taken for the second.
        The checkpoint id for a row without interrupt ids; ``None`` when the
        thread does not wait, or waits on several questions at once (which
        ``answer`` cannot tell apart: its program answers each by its id)."""
        if self.status != "waiting" or len(self.interrupts) > 1:
            return None
        if len(self.interrupt_ids) == 1:
            return self.interrupt_ids[0]
        return self.checkpoint_id

    # what runs_view.display_status reads (a thread has no lease: a writer on
    # another host is never judged gone, one of this host is when its process is)
    @property
    def run_id(self) -> str:
        return self.thread_id

    @property
    def lease_owner(self) -> str | None:
        return self.owner

    @property
    def lease_expires_at(self) -> float:
        return math.inf


def ts(tx: SqlTx) -> str:
    """The placeholder of a time parameter (UTC epoch seconds): PostgreSQL
    stores ``timestamptz``, SQLite ``REAL`` (as Flowdesk's own tables)."""
    return "to_timestamp(?)" if tx.dialect == "postgres" else "?"


def epoch(tx: SqlTx, column: str) -> str:
    """A time column read back as UTC epoch seconds."""
    return f"extract(epoch from {column})" if tx.dialect == "postgres" else column


def _columns(tx: SqlTx) -> str:
    return (
        f"thread_id, status, {epoch(tx, 'created_at')}, {epoch(tx, 'updated_at')}, owner, "
        "context, interrupts, checkpoint_id"
    )


def interrupts_json(interrupts: Sequence[Any]) -> str:
    """The ``interrupts`` column for LangGraph ``Interrupt`` objects:
    ``{"values": [...], "ids": [...]}`` (a row stored before the ids were
    kept holds the list of values alone)."""
    values = [getattr(i, "value", i) for i in interrupts]
    ids = [str(i.id) for i in interrupts if getattr(i, "id", None) is not None]
    shown = {"values": values, "ids": ids if len(ids) == len(values) else []}
    return json.dumps(shown, default=str, ensure_ascii=False)


def _interrupts(text: str | None) -> tuple[list[Any], list[str]]:
    """The values and ids the ``interrupts`` column holds (see :func:`interrupts_json`)."""
    stored = json.loads(text) if text else []
    if isinstance(stored, dict):
        return list(stored["values"]), [str(i) for i in stored["ids"]]
    return list(stored), []


def _thread(row: Sequence[Any]) -> Thread:
    values, ids = _interrupts(row[6])
    return Thread(
        thread_id=str(row[0]),
        status=str(row[1]),
        created_at=float(row[2]),
        updated_at=float(row[3]),
        owner=row[4],
        context=json.loads(row[5] or "{}"),
        interrupts=values,
        checkpoint_id=row[7],
        interrupt_ids=ids,
    )


def list_threads(
    store: DomainStore, scope: str, statuses: Sequence[str] | None = None
) -> list[Thread]:
    """Every thread of ``scope`` (optionally of these statuses), newest first.

    Raises:
        StoreError: the store cannot be read (or has no ``sql`` capability).
    """

    def op(tx: SqlTx) -> list[Thread]:
        rows = tx.fetchall(
            f"SELECT {_columns(tx)} FROM langgraph_threads WHERE scope=? "
            "ORDER BY created_at DESC, thread_id DESC",
            (scope,),
        )
        return [_thread(r) for r in rows]

    threads = store.query(op)
    return [t for t in threads if not statuses or t.status in statuses]


def get_thread(store: DomainStore, scope: str, thread_id: str) -> Thread | None:
    """The thread ``thread_id`` of ``scope``, or ``None``."""

    def op(tx: SqlTx) -> Thread | None:
        row = tx.fetchone(
            f"SELECT {_columns(tx)} FROM langgraph_threads WHERE scope=? AND thread_id=?",
            (scope, thread_id),
        )
        return None if row is None else _thread(row)

    return store.query(op)


@dataclass(frozen=True)
class CheckpointRow:
    """One root checkpoint of a thread as the CLI lists it (nothing decoded)."""

    checkpoint_id: str
    parent_id: str | None
    created_at: float
    writes: int


def checkpoint_rows(store: DomainStore, scope: str, thread_id: str) -> list[CheckpointRow]:
    """The thread's root checkpoints, oldest first, with their pending-write counts."""

    def op(tx: SqlTx) -> list[CheckpointRow]:
        rows = tx.fetchall(
            f"SELECT c.checkpoint_id, c.parent_id, {epoch(tx, 'c.created_at')}, "
            "(SELECT count(*) FROM langgraph_writes w WHERE w.scope=c.scope AND "
            "w.thread_id=c.thread_id AND w.checkpoint_ns=c.checkpoint_ns AND "
            "w.checkpoint_id=c.checkpoint_id) "
            "FROM langgraph_checkpoints c WHERE c.scope=? AND c.thread_id=? "
            "AND c.checkpoint_ns='' ORDER BY c.checkpoint_id",
            (scope, thread_id),
        )
        return [CheckpointRow(str(r[0]), r[1], float(r[2]), int(r[3])) for r in rows]

    return store.query(op)


def store_answer(
    store: DomainStore, scope: str, thread_id: str, value: Any, wait_id: str | None = None
) -> Thread:
    """Answer the thread's unanswered interrupt with ``value`` (JSON).

    ``wait_id``: the question the person read (:attr:`Thread.wait_id`, what
    ``show`` and ``waiting`` print as ``--wait-id``, the app's thread view
    holds): a thread that asks another question by then (that one was
    answered and its program asked the next, at the next checkpoint or in
    the same node) refuses the answer, so a command run twice, or by two
    people, never answers a question its sender did not see. ``None``: the
    question the thread asks when this reads it.

    Stores ``(NULL_TASK_ID, "__resume__", value)`` on the thread's latest root
    checkpoint, which is what LangGraph's ``Command(resume=value)`` stores
    (``langgraph.pregel._loop``: a resume without interrupt ids); the graph's
    next ``invoke(None, config)`` gives it to the ``interrupt()`` call and
    goes on. The value is stored in LangGraph's ``"json"`` encoding.

    Returns:
        The thread as it is now (``answered``, with no owner: the answer
        waits for the program that runs the graph; its next checkpoint moves
        the thread on to ``running``, ``waiting`` or ``completed``).

    Raises:
        UnknownRunError: no such thread.
        ThreadCorruptError: the checkpoint it waits at was changed outside
            Flowdesk (nothing stored); a damaged database page raises
            ``DatabaseCorruptError`` the same way.
        RunStateError: the thread is not waiting for an answer, asks
            another question than ``wait_id``, or another answer took it
            first (nothing stored; exit 1, as for a flow run).
        InputError: ``value`` is not JSON, or the thread waits on several
            interrupts at once (a resume without ids would answer the first
            LangGraph picks; its program answers them by id).
    """
    try:
        blob = json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InputError(f"the answer must be JSON: {exc}") from exc

    def op(tx: SqlTx) -> Thread:
        row = tx.fetchone(
            f"SELECT {_columns(tx)} FROM langgraph_threads WHERE scope=? AND thread_id=?",
            (scope, thread_id),
        )
        if row is None:
            raise UnknownRunError(f"no LangGraph thread {thread_id} in scope {scope!r}")
        thread = _thread(row)
        asked = row[6]  # the compare-and-set below takes this question only
        refuse_moved(thread.thread_id, thread.status, thread.owner, scope)
        if thread.status != "waiting" or thread.checkpoint_id is None:
            # `running` is also what a thread whose process was killed stores
            said = "running or interrupted" if thread.status == "running" else thread.status
            raise RunStateError(
                f"LangGraph thread {thread_id} is {said}, not waiting for an answer; "
                "nothing was stored"
            )
        if len(thread.interrupts) > 1:
            # LangGraph gives a resume without interrupt ids to the first
            # pending interrupt, whichever question a person read
            raise InputError(
                f"LangGraph thread {thread_id} waits on {len(thread.interrupts)} questions at "
                "once (parallel nodes each called interrupt()); an answer stored here would go "
                "to whichever LangGraph resumes first, not the one you mean, so nothing was "
                f"stored. {several_hint(thread_id)}"
            )
        if wait_id is not None and wait_id != thread.wait_id:
            raise RunStateError(
                f"LangGraph thread {thread_id} does not ask question {wait_id!r}: it asks "
                f"another question now ({thread.wait_id!r}); the one you answered was "
                "answered elsewhere, or the id is mistyped; nothing was stored"
            )
        stored = tx.fetchone(
            f"SELECT {CHECKPOINT_COLUMNS} FROM langgraph_checkpoints WHERE scope=? AND "
            "thread_id=? AND checkpoint_ns='' AND checkpoint_id=?",
            (scope, thread_id, thread.checkpoint_id),
        )
        if stored is not None:  # (a thread row without it: its program's to tell)
            # an answer to a checkpoint its program cannot load is refused
            # here, not stored to fail there
            verify_checkpoint(thread_id, stored)
        now = time.time()
        # the answer is taken by a compare-and-set on the row: of two answers
        # at one instant (the CLI and the app), one is stored and the other
        # refused; a plain read would let both pass on PostgreSQL (READ
        # COMMITTED) and the second overwrite the first
        taken = tx.execute(
            f"UPDATE langgraph_threads SET status='{ANSWERED}', owner=NULL, interrupts=NULL, "
            f"updated_at={ts(tx)} WHERE scope=? AND thread_id=? AND status='waiting' "
            "AND checkpoint_id=? AND "
            + ("interrupts IS NULL" if asked is None else "interrupts=?"),
            (now, scope, thread_id, thread.checkpoint_id, *([] if asked is None else [asked])),
        )
        if taken.rowcount != 1:
            raise RunStateError(
                f"LangGraph thread {thread_id} was answered or moved on a moment ago, "
                "not by this answer; nothing was stored"
            )
        sum_ = checksum(thread.checkpoint_id, NULL_TASK_ID, RESUME_IDX, RESUME, "json", blob)
        tx.execute(
            "INSERT INTO langgraph_writes (scope, thread_id, checkpoint_ns, checkpoint_id, "
            "task_id, idx, task_path, channel, type, blob, checksum) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (scope, thread_id, checkpoint_ns, checkpoint_id, task_id, idx) "
            "DO UPDATE SET type=excluded.type, blob=excluded.blob, checksum=excluded.checksum",
            (scope, thread_id, "", thread.checkpoint_id, NULL_TASK_ID, RESUME_IDX, "",
             RESUME, "json", blob, sum_),
        )  # fmt: skip
        return Thread(
            thread.thread_id, ANSWERED, thread.created_at, now, None, thread.context, [],
            thread.checkpoint_id,
        )  # fmt: skip

    return store.write(op)


def saver_line(url: str, scope: str | None) -> str:
    """The line that opens the checkpointer on the database ``url`` (a URL
    without its password), as ``db copy`` prints it and a program pastes
    it: ``FlowdeskSaver.open('postgresql://host/db', scope='s')``, the
    scope left out when ``None``. Python source (:func:`python_literal`)."""
    where = [python_literal(url)]
    if scope is not None:
        where.append(f"scope={python_literal(scope)}")
    return f"FlowdeskSaver.open({', '.join(where)})"


def refuse_moved(thread_id: str, status: str, owner: str | None, scope: str) -> None:
    """Refuse a thread ``db copy`` moved to PostgreSQL (an unfinished thread
    whose ``owner`` in the file it left is ``moved to URL``).

    Raises:
        ThreadMovedError: it moved; the message names where and the line
            that opens its checkpointer there (with ``scope``).
    """
    where = moved_to(owner)
    if where is not None and owner is not None and status != "completed":
        raise ThreadMovedError(thread_id, owner, saver_line(where, scope))


def asks_several(thread: Thread) -> bool:
    """Whether ``thread`` waits on several questions at once (parallel nodes
    each called ``interrupt()``): ``flowdesk answer`` refuses it, its program
    answers them by interrupt id (:func:`several_hint`)."""
    return thread.status == "waiting" and len(thread.interrupts) > 1


def several_hint(thread_id: str) -> str:
    """How the program of a thread waiting on several questions at once
    answers them (LangGraph's API: a resume keyed by interrupt id)."""
    config = python_literal({"configurable": {"thread_id": thread_id}})
    return (
        "Its program answers them, each by its interrupt id: "
        f"graph.invoke(Command(resume={{interrupt.id: value, ...}}), {config}, "
        'durability="sync") (the ids are in graph.get_state(config).interrupts)'
    )


def stopped_lines(stopped: Any) -> list[str]:
    """What ``show`` and the app say of the nodes of a thread ``interrupted``
    mid-step or ``failed`` (``stopped``: a ``FlowdeskSaver.stopped_at``):
    those that raised, and those cut off, which its program runs again from
    their start (as LangGraph does)."""
    lines = [
        f"failed: node {one_line(node)} raised {one_line(error)}; its program runs it again "
        "from the start, so what it did before (a payment, a message) may happen twice"
        for node, error in stopped.failed
    ]
    if stopped.running:
        nodes = ", ".join(one_line(n) for n in stopped.running)
        one = len(stopped.running) == 1
        lines.append(
            f"cut off: node{'' if one else 's'} {nodes} had not finished when its process "
            f"stopped; its program runs {'it' if one else 'them'} again from the start, so "
            "what ran before the stop (a payment, a message) may happen twice: Flowdesk "
            "cannot tell whether it did"
        )
    return lines


def resume_hint(thread_id: str) -> str:
    """What a program runs to continue an interrupted or answered thread
    (LangGraph's API), as the README recommends: ``durability="sync"``
    stores each step before the next, so its finished nodes do not run
    again after a crash. The config is Python source (:func:`python_literal`:
    ASCII, every character of an odd thread id an escape), pasted as printed."""
    config = python_literal({"configurable": {"thread_id": thread_id}})
    return f'graph.invoke(None, {config}, durability="sync")'


@dataclass(frozen=True)
class ThreadIds:
    """The thread ids of one scope, as run-id resolution reads them
    (:class:`desktop_app.store.runids.ThreadReader`)."""

    store: DomainStore
    scope: str

    def exists(self, thread_id: str) -> bool:
        """Whether thread ``thread_id`` exists (one indexed read).

        Raises:
            StoreError: the store cannot be read.
        """
        return get_thread(self.store, self.scope, thread_id) is not None

    def ids(self) -> list[str]:
        """Every thread id of the scope.

        Raises:
            StoreError: the store cannot be read.
        """
        return [t.thread_id for t in list_threads(self.store, self.scope)]
