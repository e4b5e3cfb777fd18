"""Domain rows of the ``tidy`` flow: one row per top-level file of a run's folder.

A row's ``status`` moves ``planned`` (its ``reason`` :data:`APPROVED` once
the moves were approved) -> ``queued`` (its outbox intent committed)
-> ``moved`` (the file mover saw the file at its destination), or to
``skipped`` with a ``reason`` (not approved, left in place, or the file
system no longer matched the plan), or to ``refused`` with a ``reason`` (the
move would have left the folder, followed a symbolic link, replaced a file or
used an unsafe name; nothing was moved). ``moved_back_at`` is set when an undo
put the file back at its old place (or found it there), in batches as the
undo goes; ``tidy_undos`` holds one row per run an undo was started for
(who, since when, and when it finished), so an undo cut short is told from
one that finished.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from desktop_app.store.domain import code_point_order
from desktop_app.store.protocol import DomainWrite, SqlTx

_COLUMNS = "src, dst, kind, month, status, reason, intent_key"


def _read_columns(tx: SqlTx) -> str:
    """:data:`_COLUMNS` and ``moved_back_at`` as epoch seconds on either dialect."""
    back = (
        "extract(epoch from moved_back_at)::float8" if tx.dialect == "postgres" else "moved_back_at"
    )
    return f"{_COLUMNS}, {back}"


@dataclass(frozen=True)
class TidyMove:
    """One file of a tidy run.

    Attributes:
        src: absolute path of the file before the move.
        dst: absolute destination, or ``None`` for a file left in place.
        kind: ``images``, ``documents``, ``audio``, ``video``, ``archives``,
            ``code`` or ``other``.
        month: ``YYYY-MM`` of the file's modification time (UTC).
        status: ``planned``, ``queued``, ``moved``, ``skipped`` or ``refused``.
        reason: why the file was skipped or refused, else ``None``.
        intent_key: the idempotency key of its outbox intent, once queued.
        moved_back_at: when an undo put the file back at ``src`` (UTC epoch
            seconds), else ``None``.
    """

    src: str
    dst: str | None
    kind: str
    month: str
    status: str = "planned"
    reason: str | None = None
    intent_key: str | None = None
    moved_back_at: float | None = None


def _row(r: Sequence[Any]) -> TidyMove:
    return TidyMove(*r)


def record_plan(run_id: str, moves: Sequence[TidyMove]) -> DomainWrite:
    """Insert every row of the plan (a re-run of the step replaces its rows)."""
    rows = [
        (run_id, m.src, m.dst, m.kind, m.month, m.status, m.reason, m.intent_key) for m in moves
    ]

    def write(tx: SqlTx) -> None:
        tx.execute("DELETE FROM tidy_moves WHERE run_id=?", (run_id,))
        tx.executemany(f"INSERT INTO tidy_moves(run_id, {_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)", rows)

    return write


def next_planned(run_id: str) -> Callable[[SqlTx], TidyMove | None]:
    """Query op: the first row still ``planned`` (by source path, code point
    order), or ``None``."""

    def query(tx: SqlTx) -> TidyMove | None:
        row = tx.fetchone(
            f"SELECT {_read_columns(tx)} FROM tidy_moves WHERE run_id=? AND status='planned' "
            f"ORDER BY {code_point_order(tx, 'src')} LIMIT 1",
            (run_id,),
        )
        return None if row is None else _row(row)

    return query


#: the ``reason`` of a ``planned`` row once the person approved the moves and
#: before the row's move is queued (a run killed, or out of disk, mid-queueing
#: keeps such rows until it resumes): approved, not waiting for approval
APPROVED = "approved, not queued yet"


def approve_planned(run_id: str) -> DomainWrite:
    """Every row of run ``run_id`` still ``planned`` records the approval
    (``reason`` :data:`APPROVED`), in the transaction of the approval's
    checkpoint (and of the first move queued, for a run approved before
    rows recorded it)."""

    def write(tx: SqlTx) -> None:
        tx.execute(
            "UPDATE tidy_moves SET reason=? WHERE run_id=? AND status='planned' AND reason IS NULL",
            (APPROVED, run_id),
        )

    return write


def mark_queued(run_id: str, src: str, intent_key: str) -> DomainWrite:
    """The row's outbox intent commits in this same transaction (its
    ``reason`` :data:`APPROVED` is cleared: it is queued now)."""

    def write(tx: SqlTx) -> None:
        tx.execute(
            "UPDATE tidy_moves SET status='queued', reason=NULL, intent_key=? "
            "WHERE run_id=? AND src=? AND status='planned'",
            (intent_key, run_id, src),
        )

    return write


def skip_planned(run_id: str, reason: str) -> DomainWrite:
    """Every row still ``planned`` becomes ``skipped`` with ``reason``."""

    def write(tx: SqlTx) -> None:
        tx.execute(
            "UPDATE tidy_moves SET status='skipped', reason=? WHERE run_id=? AND status='planned'",
            (reason, run_id),
        )

    return write


def withdraw_queued(intent_keys: Sequence[str], reason: str) -> Callable[[SqlTx], None]:
    """Standalone write for ``store.write``: the rows queued under these keys
    whose outbox intents were withdrawn (never delivered) become ``skipped``
    with ``reason``; a row the mover recorded ``moved`` stays ``moved``."""

    def write(tx: SqlTx) -> None:
        tx.executemany(
            "UPDATE tidy_moves SET status='skipped', reason=? WHERE intent_key=? "
            "AND status='queued'",
            [(reason, k) for k in intent_keys],
        )

    return write


def queued_elsewhere(run_id: str, folder: str) -> Callable[[SqlTx], dict[str, str]]:
    """Query op: source path -> run id, of the files at the top of
    ``folder`` that a tidy run other than ``run_id`` has a ``queued`` move
    for (not made yet)."""

    def query(tx: SqlTx) -> dict[str, str]:
        rows = tx.fetchall(
            "SELECT src, run_id FROM tidy_moves WHERE status='queued' AND run_id<>?", (run_id,)
        )
        return {str(src): str(rid) for src, rid in rows if os.path.dirname(src) == folder}

    return query


def moved_by_other(intent_key: str, dst: str) -> Callable[[SqlTx], str | None]:
    """Query op: the id of a tidy run other than the one queued under
    ``intent_key`` whose row records a move to ``dst`` made (``moved``), or
    ``None``."""

    def query(tx: SqlTx) -> str | None:
        row = tx.fetchone(
            "SELECT run_id FROM tidy_moves WHERE dst=? AND status='moved' AND "
            "intent_key<>? LIMIT 1",
            (dst, intent_key),
        )
        return None if row is None else str(row[0])

    return query


def record_moved_back(
    run_id: str, destinations: Sequence[str], at: float
) -> Callable[[SqlTx], None]:
    """Standalone write for ``store.write``: the rows of run ``run_id`` whose
    files an undo put back at their old place (or found there), by their
    ``dst`` paths, get ``moved_back_at = at`` (UTC epoch seconds); a row
    marked before keeps its first time."""

    def write(tx: SqlTx) -> None:
        at_sql = "to_timestamp(?)" if tx.dialect == "postgres" else "?"
        tx.executemany(
            f"UPDATE tidy_moves SET moved_back_at={at_sql} WHERE run_id=? AND dst=? "
            "AND moved_back_at IS NULL",
            [(at, run_id, dst) for dst in destinations],
        )

    return write


def moves_of_run(run_id: str) -> Callable[[SqlTx], list[TidyMove]]:
    """Query op: every row of the run, ordered by source path (code point order)."""

    def query(tx: SqlTx) -> list[TidyMove]:
        rows = tx.fetchall(
            f"SELECT {_read_columns(tx)} FROM tidy_moves WHERE run_id=? "
            f"ORDER BY {code_point_order(tx, 'src')}",
            (run_id,),
        )
        return [_row(r) for r in rows]

    return query


def move_by_key(intent_key: str) -> Callable[[SqlTx], TidyMove | None]:
    """Query op: the row queued under this outbox idempotency key, or ``None``."""

    def query(tx: SqlTx) -> TidyMove | None:
        row = tx.fetchone(
            f"SELECT {_read_columns(tx)} FROM tidy_moves WHERE intent_key=?", (intent_key,)
        )
        return None if row is None else _row(row)

    return query


def record_outcome(
    intent_key: str, moved: bool, reason: str | None = None, *, status: str = "skipped"
) -> Callable[[SqlTx], None]:
    """Standalone write for ``store.write`` (its own transaction, outside any
    checkpoint; not ``query``, which is read-only): what the
    file mover found or did for the row queued under ``intent_key``. Idempotent;
    a row already ``moved`` stays ``moved``.

    Args:
        moved: the file is at its destination (``reason`` and ``status`` unused).
        reason: why it was not moved.
        status: ``skipped`` or ``refused`` when not moved.
    """
    if status not in ("skipped", "refused"):
        raise ValueError(f"status must be 'skipped' or 'refused', not {status!r}")

    def write(tx: SqlTx) -> None:
        if moved:
            tx.execute(
                "UPDATE tidy_moves SET status='moved', reason=NULL WHERE intent_key=?",
                (intent_key,),
            )
        else:
            tx.execute(
                "UPDATE tidy_moves SET status=?, reason=? WHERE intent_key=? AND status<>'moved'",
                (status, reason, intent_key),
            )

    return write


@dataclass(frozen=True)
class TidyUndo:
    """The latest undo started for a tidy run (its ``tidy_undos`` row).

    Attributes:
        owner: owner id (``host:pid:nonce``) of the process undoing it, or
            ``None`` once it stopped on an error.
        started_at: when it began moving files back (UTC epoch seconds).
        finished_at: when it ended (UTC epoch seconds), or ``None``: it is
            under way, or its process stopped before the end (interrupted).
    """

    owner: str | None
    started_at: float
    finished_at: float | None


def _at(tx: SqlTx) -> str:
    return "to_timestamp(?)" if tx.dialect == "postgres" else "?"


def _epoch(tx: SqlTx, column: str) -> str:
    return f"extract(epoch from {column})::float8" if tx.dialect == "postgres" else column


def end_undo(run_id: str, owner: str, at: float | None) -> Callable[[SqlTx], None]:
    """Standalone write for ``store.write``: the undo of run ``run_id`` by
    ``owner`` ended: finished at ``at`` (UTC epoch seconds), or, with ``at``
    ``None``, stopped on an error (its owner cleared: no process is on it
    any more). A record a later undo took over is left as it is."""

    def write(tx: SqlTx) -> None:
        if at is None:
            tx.execute(
                "UPDATE tidy_undos SET undo_owner=NULL WHERE run_id=? AND undo_owner=?",
                (run_id, owner),
            )
        else:
            tx.execute(
                f"UPDATE tidy_undos SET finished_at={_at(tx)} WHERE run_id=? AND undo_owner=?",
                (at, run_id, owner),
            )

    return write


def undo_of(run_id: str) -> Callable[[SqlTx], TidyUndo | None]:
    """Query op: the latest undo started for run ``run_id``, or ``None`` (never undone)."""

    def query(tx: SqlTx) -> TidyUndo | None:
        row = tx.fetchone(
            f"SELECT undo_owner, {_epoch(tx, 'started_at')}, {_epoch(tx, 'finished_at')} "
            "FROM tidy_undos WHERE run_id=?",
            (run_id,),
        )
        return None if row is None else TidyUndo(row[0], float(row[1]), row[2])

    return query


@dataclass(frozen=True)
class UndoHolder:
    """The undo of a tidy run that holds it (its ``tidy_undos`` row, unfinished).

    Attributes:
        owner: owner id (``host:pid:nonce``) of the process undoing it.
        started_at: when it began (UTC epoch seconds).
        last_seen: the latest sign of it (UTC epoch seconds): when it began,
            or the latest batch of files it recorded back.
    """

    owner: str
    started_at: float
    last_seen: float


def claim_undo(
    run_id: str, owner: str, at: float, may_take: Callable[[UndoHolder], bool]
) -> Callable[[SqlTx], UndoHolder | None]:
    """Standalone write for ``store.write``: process ``owner`` claims the undo
    of run ``run_id`` at ``at`` (UTC epoch seconds), as a dispatcher claims
    an outbox intent: when no undo of the run is under way (none yet, the
    last one finished or stopped on an error), or the one under way is one
    ``may_take`` says may be taken over (its process is gone). The claim is
    a compare-and-set on the holder seen, so of two undos claiming at once
    one gets it.

    Returns:
        ``None``: ``owner`` holds the undo now (its record replaces the
        earlier one); else the :class:`UndoHolder` that keeps it.
    """

    def write(tx: SqlTx) -> UndoHolder | None:
        while True:
            row = tx.fetchone(
                f"SELECT undo_owner, {_epoch(tx, 'started_at')}, {_epoch(tx, 'finished_at')} "
                "FROM tidy_undos WHERE run_id=?",
                (run_id,),
            )
            if row is None:
                done = tx.execute(
                    f"INSERT INTO tidy_undos(run_id, undo_owner, started_at, finished_at) "
                    f"VALUES (?, ?, {_at(tx)}, NULL) ON CONFLICT(run_id) DO NOTHING",
                    (run_id, owner, at),
                )
                if done.rowcount == 1:
                    return None
                continue  # another undo inserted it first: judge that one
            held_by, started, finished = row
            if held_by is not None and finished is None:
                last = tx.fetchone(
                    f"SELECT max({_epoch(tx, 'moved_back_at')}) FROM tidy_moves WHERE run_id=?",
                    (run_id,),
                )
                seen = max(float(started), float(last[0]) if last and last[0] else 0.0)
                holder = UndoHolder(str(held_by), float(started), seen)
                if not may_take(holder):
                    return holder
            same = "undo_owner=?" if held_by is not None else "undo_owner IS NULL"
            done = tx.execute(
                f"UPDATE tidy_undos SET undo_owner=?, started_at={_at(tx)}, finished_at=NULL "
                f"WHERE run_id=? AND {same}",
                (owner, at, run_id, *(() if held_by is None else (held_by,))),
            )
            if done.rowcount == 1:
                return None

    return write
