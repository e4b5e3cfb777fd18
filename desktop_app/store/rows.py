"""Database rows <-> records, the part both SQL backends share (pure: no SQL
library, no connection).

Each reader takes one row tuple in the column order its backend selects
(the SQLite and PostgreSQL stores select the same columns in the same
order; PostgreSQL turns its ``timestamptz`` columns into UTC epoch seconds
in the SELECT) and returns a record of :mod:`desktop_app.store.records`.
The writers (:func:`step_json`, :func:`checkpoint_values`,
:func:`wait_values`) give the values both backends store, so a database
copied from one to the other holds the same bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from desktop_app.errors import (
    CheckpointCorruptError,
    CheckpointDecodeError,
    CheckpointNotFoundError,
    DedupeKeyReusedError,
    DuplicateWaitIdError,
    StateNotStorableError,
    StoreError,
    moved_to,
)
from desktop_app.store import codec
from desktop_app.store.records import (
    AgentRun,
    Checkpoint,
    CheckpointInfo,
    Event,
    Intent,
    RunRecord,
    Signal,
    StepRecord,
    ToolResult,
    Wait,
)


def detached(cp: Checkpoint) -> Checkpoint:
    """``cp`` with its own copy of the state and of the step map: a store
    keeps this in its cache of latest checkpoints and hands out copies, so
    a caller that changes a dict it passed in or got back cannot change the
    cached checkpoint the next delta is computed against (which would store
    an empty delta, and lose the change on disk). Made positionally, in
    the fields' order (``dataclasses.replace`` costs ~5 us more: it runs at
    every run's creation)."""
    return Checkpoint(
        cp.run_id,
        cp.revision,
        cp.status,
        codec.copy(dict(cp.state)),
        dict(cp.steps),
        cp.frontier,
        cp.created_at,
        cp.step_id,
        cp.progress,
        cp.error,
        cp.meta,
        cp.waits,
    )


class CheckpointRow(tuple[Any, ...]):
    """The values of one ``checkpoints`` row (see :func:`checkpoint_values`),
    carrying what they were encoded from, so a store that wrote the row can
    cache the checkpoint without decoding its own JSON again.

    Attributes:
        state_delta: the state delta a ``delta`` row encodes (the writer's
            objects: copy before keeping them), ``None`` for a snapshot.
        step_ids: ids of the step records the row holds.
    """

    state_delta: dict[str, Any] | None
    step_ids: tuple[str, ...]

    def __new__(
        cls, values: Sequence[Any], state_delta: dict[str, Any] | None, step_ids: Sequence[str]
    ) -> CheckpointRow:
        row = super().__new__(cls, values)
        row.state_delta = state_delta
        row.step_ids = tuple(step_ids)
        return row


def remembered(
    cp: Checkpoint, previous: Checkpoint | None, row: CheckpointRow, *, given: bool = False
) -> Checkpoint:
    """``cp`` as a store caches it once ``row`` (its :func:`checkpoint_values`
    against ``previous``) is written: a private state and step map, like
    :func:`detached`, but costing what the step changed rather than the whole
    state and every step record.

    A checkpoint its writer ``given`` up (``AppendRequest.given``: neither
    its state nor its step map changes after the append) is cached as it
    is, at no cost. Otherwise a ``delta`` row's state is ``previous.state``
    with a copy of the row's delta applied (new objects for the changed
    fields only: what a read from disk would fold); step records are
    immutable, so the changed ones are put into ``previous``'s step map in
    place (into a copy of it when it is a given checkpoint's). ``previous``
    must therefore be the store's own copy of the revision before (cached or
    loaded, never handed out), and the store gives it up: it replaces it
    with the result. A ``snapshot`` row (or no ``previous``) costs a whole
    :func:`detached` copy.
    """
    if given:
        return cp
    if previous is None or row.state_delta is None:
        return detached(cp)
    state = codec.apply_state_delta(previous.state, codec.copy(row.state_delta))
    # ours: detached or folded from rows (an annotation, not a cast() call: a hot path)
    steps: dict[str, StepRecord] = previous.steps  # type: ignore[assignment]
    if type(steps) is not dict:  # a given checkpoint's step map: never changed
        steps = dict(steps)
    for step_id in row.step_ids:
        steps[step_id] = cp.steps[step_id]
    return Checkpoint(
        cp.run_id,
        cp.revision,
        cp.status,
        state,
        steps,
        cp.frontier,
        cp.created_at,
        cp.step_id,
        cp.progress,
        cp.error,
        cp.meta,
        cp.waits,
    )


def run_from_row(row: Sequence[Any]) -> RunRecord:
    """A ``runs`` row (run_id, flow_name, flow_version, status, revision,
    created_at, updated_at, scope, flow_key, parent_run_id, context,
    progress_done, progress_total, error, lease_owner, lease_expires_at,
    tenant_id, session_id, deadline_at) as a :class:`RunRecord`."""
    progress = None if row[11] is None else (int(row[11]), int(row[12]))
    return RunRecord(
        run_id=row[0],
        flow_name=row[1],
        flow_version=row[2],
        status=row[3],
        revision=int(row[4]),
        created_at=float(row[5]),
        updated_at=float(row[6]),
        scope=row[7],
        flow_key=row[8],
        parent_run_id=row[9],
        context=codec.loads(row[10]),
        progress=progress,
        error=row[13],
        lease_owner=row[14],
        lease_expires_at=row[15],
        deadline_at=row[18],
    )


def intent_from_row(row: Sequence[Any], *, interrupted: bool = False) -> Intent:
    """An ``outbox`` row (intent_id, run_id, step_id, destination, payload,
    status, attempts, receipt, last_error[, claimed_by, ...]) as an
    :class:`Intent` (``moved_to`` from a claim ``db copy`` wrote)."""
    return Intent(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        codec.loads(row[4]),
        row[5],
        int(row[6]),
        None if row[7] is None else codec.loads(row[7]),
        row[8],
        interrupted=interrupted,
        moved_to=moved_to(row[9] if len(row) > 9 else None),
    )


def claim_is_free(
    holder: str | None,
    until: float | None,
    owner: str,
    at: float,
    presumed_dead: Callable[[str], bool] | None,
    presumed_alive: Callable[[str], bool] | None,
) -> bool:
    """Whether an outbox claim of ``holder`` until ``until`` (UTC epoch s;
    ``None``: no expiry recorded) may be taken by ``owner`` at ``at``: no
    claimant, ``owner``'s own, a claimant ``presumed_dead`` says is gone, or
    a claim expired at ``at`` whose claimant ``presumed_alive`` does not say
    still runs. The rule of run leases (:func:`~desktop_app.store.records.lease_is_free`):
    liveness beats clocks, so a live dispatcher on this host keeps a slow
    send whatever the clocks say."""
    if holder is None or holder == owner:
        return True
    if presumed_dead is not None and presumed_dead(holder):
        return True
    expired = until is None or until <= at
    return expired and not (presumed_alive is not None and presumed_alive(holder))


def withdrawable(
    status: str,
    holder: str | None,
    until: float | None,
    at: float,
    presumed_dead: Callable[[str], bool] | None,
    presumed_alive: Callable[[str], bool] | None = None,
) -> bool:
    """Whether ``withdraw_intents`` may take back an intent with this status
    and claim (``holder`` until ``until``, epoch seconds) at ``at``: every
    ``pending`` one; a ``sending`` one only when no live dispatcher holds it
    (:func:`claim_is_free`, judged for nobody)."""
    if status == "pending":
        return True
    return holder is None or claim_is_free(holder, until, "", at, presumed_dead, presumed_alive)


def signal_from_row(name: str, key: str, row: Sequence[Any]) -> Signal:
    """A ``signals`` row (signal_id, payload, sent_at) as a :class:`Signal`."""
    return Signal(int(row[0]), name, key, codec.loads(row[1]), float(row[2]))


def deduped_signal(row: Sequence[Any]) -> Signal:
    """A ``signals`` row read by its dedupe key (signal_id, name, key,
    payload, sent_at) as a :class:`Signal`."""
    return Signal(int(row[0]), str(row[1]), str(row[2]), codec.loads(row[3]), float(row[4]))


def same_signal_or_refuse(first: Signal, dedupe_key: str, name: str, key: str, body: str) -> int:
    """``first``'s id when a send of ``(name, key)`` with payload ``body``
    (:func:`codec.dumps` text) under ``dedupe_key`` is the same request as
    ``first`` (the signal stored with that key): a duplicate, which stores
    nothing.

    Raises:
        DedupeKeyReusedError: the send has another name, key or payload
            (exit 2); nothing is stored.
    """
    if (first.name, first.key) == (name, key) and codec.dumps(first.payload) == body:
        return first.signal_id
    raise DedupeKeyReusedError(dedupe_key, first.signal_id, first.name, first.key, (name, key))


def event_from_row(type_: str, row: Sequence[Any]) -> Event:
    """An ``events`` row (event_id, payload, published_at) as an :class:`Event`."""
    return Event(int(row[0]), type_, codec.loads(row[1]), float(row[2]))


def checkpoint_infos(run_id: str, rows: Sequence[Sequence[Any]]) -> list[CheckpointInfo]:
    """``checkpoints`` rows (revision, status, step_id, created_at) as
    :class:`CheckpointInfo` records, in the given order."""
    return [CheckpointInfo(run_id, int(r), s, sid, float(at)) for r, s, sid, at in rows]


def agent_run_from_row(row: Sequence[Any]) -> AgentRun:
    """An ``agent_runs`` row (run_id, agent, status, parent_run_id, input,
    response, error, error_type, turns, pending_call, created_at, updated_at,
    deadline_at, expires_at, retry_at, context, lease_owner,
    lease_expires_at) as an :class:`AgentRun`."""
    return AgentRun(
        run_id=row[0],
        agent=row[1],
        status=row[2],
        parent_run_id=row[3],
        input=row[4],
        response=row[5],
        error=row[6],
        error_type=row[7],
        turns=int(row[8]),
        pending_call=None if row[9] is None else json.loads(row[9]),
        created_at=float(row[10]),
        updated_at=float(row[11]),
        deadline_at=row[12],
        expires_at=row[13],
        retry_at=row[14],
        context=json.loads(row[15]),
        lease_owner=row[16],
        lease_expires_at=row[17],
    )


def tool_result_from_row(row: Sequence[Any]) -> ToolResult:
    """An ``agent_tool_results`` row (tool_key, tool, status, result,
    attempts, reused) as a :class:`ToolResult`."""
    return ToolResult(str(row[0]), str(row[1]), row[2], row[3], int(row[4]), int(row[5]))


def step_json(rec: StepRecord) -> dict[str, Any]:
    """A step record as stored: its fields without the ones at their default
    (``None``, iteration 0) and without ``step_id`` (the key it is stored
    under), so a checkpoint row fills fewer pages. ``StepRecord.from_json``
    with the key added back reads it (and rows written in full) exactly.
    Built field by field, not from ``to_json``: it runs for every record a
    checkpoint saves."""
    out: dict[str, Any] = {}
    if rec.status is not None:
        out["status"] = rec.status
    if rec.attempts is not None:
        out["attempts"] = rec.attempts
    if rec.started_at is not None:
        out["started_at"] = rec.started_at
    if rec.finished_at is not None:
        out["finished_at"] = rec.finished_at
    if rec.error is not None:
        out["error"] = rec.error
    if rec.error_type is not None:
        out["error_type"] = rec.error_type
    if rec.iteration is not None and rec.iteration != 0:
        out["iteration"] = rec.iteration
    if rec.duration_ms is not None:
        out["duration_ms"] = rec.duration_ms
    if rec.next_retry_at is not None:
        out["next_retry_at"] = rec.next_retry_at
    return out


def _flat_json(values: Sequence[Any]) -> str:
    """``codec.dumps(list(values))`` for a flat list or tuple of strings and
    integers (a frontier, a progress pair): orjson's text as is, the same
    (no key to sort, no ``null`` or float to re-encode); anything else, or
    what orjson refuses, takes :func:`codec.dumps`."""
    if type(values) is tuple or type(values) is list:
        for v in values:
            if type(v) is not str and type(v) is not int:
                break
        else:
            try:
                return orjson.dumps(values).decode()
            except TypeError:  # a lone surrogate, an integer beyond 64 bits
                pass
    return codec.dumps(list(values))


def checkpoint_values(
    cp: Checkpoint,
    previous: Checkpoint | None,
    changed_steps: frozenset[str] | None = None,
    changed_fields: frozenset[str] | None = None,
    *,
    error: str | None,
) -> CheckpointRow:
    """The ``checkpoints`` row of ``cp`` (see :func:`checkpoint_parts`),
    carrying the delta and the step ids it encodes (for :func:`remembered`).
    Raises TypeError / ValueError for state that is not JSON (see
    :func:`unstorable`)."""
    values, delta, changed = checkpoint_parts(
        cp, previous, changed_steps, changed_fields, error=error
    )
    return CheckpointRow(values, delta, list(changed))


def checkpoint_parts(
    cp: Checkpoint,
    previous: Checkpoint | None,
    changed_steps: frozenset[str] | None = None,
    changed_fields: frozenset[str] | None = None,
    *,
    error: str | None,
) -> tuple[tuple[Any, ...], dict[str, Any] | None, dict[str, Any]]:
    """``(values, delta, steps)``: the ``checkpoints`` row of ``cp`` as a
    plain tuple, the state delta it encodes (``None`` for a snapshot) and
    the step records it holds by id, as stored. A store caching a given
    checkpoint as it is (``AppendRequest.given``) needs the values only.

    The row: (run_id, revision, kind, status,
    step_id, created_at, state, steps, frontier, progress, error, meta,
    waits). A ``snapshot`` without ``previous``, else a ``delta`` against it
    (state diff over the fields in ``changed_fields`` when the writer names
    them, else over every field; the step records in ``changed_steps`` when
    the writer names them, else those that differ). ``error`` is the text to store (a backend
    may clean it). Raises TypeError / ValueError for state that is not JSON
    (see :func:`unstorable`)."""
    delta: dict[str, Any] | None
    if previous is None:
        kind = "snapshot"
        delta = None
        state = codec.dumps(cp.state)
        changed = {k: step_json(v) for k, v in cp.steps.items()}
    else:
        kind = "delta"
        delta = codec.diff_state(previous.state, cp.state, changed_fields)
        state = codec.dumps(delta)
        if changed_steps is not None:  # the writer says which records it touched
            steps = cp.steps
            changed = {}
            for k in changed_steps:  # a loop: a comprehension is a call of its own
                try:  # noqa: SIM105  # contextlib.suppress costs a context manager per record
                    changed[k] = step_json(steps[k])
                except KeyError:  # not in the map: nothing to store
                    pass
        else:
            changed = {k: step_json(v) for k, v in cp.steps.items() if previous.steps.get(k) != v}
    values = (
        cp.run_id,
        cp.revision,
        kind,
        cp.status,
        cp.step_id,
        # a REAL column: an int (a clock of whole seconds) would read back as
        # a float whose JSON, and so the row's checksum, differs
        float(cp.created_at),
        state,
        codec.dumps(changed),
        _flat_json(cp.frontier),
        None if cp.progress is None else _flat_json(cp.progress),
        error,
        (codec.dumps(meta if type(meta) is dict else dict(meta)) if (meta := cp.meta) else None),
        codec.dumps([w.to_json() for w in cp.waits]) if cp.waits else None,
    )
    return values, delta, changed


def check_wait_ids(cp: Checkpoint) -> None:
    """Refuse a checkpoint two of whose waits share a wait id, before
    anything of it is written (every store calls this).

    Raises:
        DuplicateWaitIdError: names the run, the revision and the wait id.
    """
    waits = cp.waits
    if len(waits) < 2:
        return
    ids = [w.wait_id for w in waits]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise DuplicateWaitIdError(cp.run_id, cp.revision, dup, ids.count(dup))


def wait_values(cp: Checkpoint) -> list[tuple[Any, ...]]:
    """The ``waits`` rows of ``cp``: (wait_id, run_id, step_id, kind, name,
    key, deadline_at, created_at) per wait.

    Raises:
        DuplicateWaitIdError: two of its waits share a wait id (:func:`check_wait_ids`).
    """
    check_wait_ids(cp)
    return [
        (w.wait_id, cp.run_id, w.step_id, w.kind, w.name, w.key, w.deadline_at, w.created_at)
        for w in cp.waits
    ]


def unstorable(cp: Checkpoint, exc: Exception) -> StoreError | StateNotStorableError:
    """The error for a checkpoint that cannot be stored as JSON text
    (``exc``: the TypeError / ValueError the codec or the driver raised, e.g.
    ``UnicodeEncodeError`` for a lone surrogate such as ``'\\udcff'`` from
    ``os.listdir`` on a file name that is not UTF-8).

    A step's checkpoint (revision 1 on) gives :class:`StateNotStorableError`
    naming the step and the first state field that cannot be stored (else
    ``"error"`` or ``"meta"``), so the driver fails that step; a new run's
    revision 0 gives a :class:`StoreError` (its input is unstorable)."""
    if cp.revision == 0:
        return StoreError(
            f"run {cp.run_id}: a value in its input state cannot be stored as JSON text "
            f"({type(exc).__name__}: {exc}); the run was not created. Pass plain JSON "
            "data (valid UTF-8 strings, numbers, lists, objects)."
        )
    parts: list[tuple[str, Any]] = [*sorted(cp.state.items()), ("error", cp.error)]
    field = next((name for name, value in parts if not _storable(value)), "meta")
    return StateNotStorableError(cp.step_id, field, f"{type(exc).__name__}: {exc}")


def _storable(value: Any) -> bool:
    """Whether ``value`` is written as JSON text that is valid UTF-8."""
    try:
        codec.dumps(value).encode("utf-8")
    except (TypeError, ValueError):
        return False
    return True


_WRITTEN_TABLE = re.compile(
    r"^\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+\w+)?|"
    r"DELETE\s+FROM)\s+([\w.\"]+)",
    re.IGNORECASE,
)


def written_table(sql: str | None) -> str | None:
    """The table an ``INSERT``/``REPLACE``/``UPDATE``/``DELETE`` statement
    writes (without quotes), else None: names the table of a domain write
    that failed when the database does not (a SQLite CHECK, a missing table)."""
    found = _WRITTEN_TABLE.match(sql or "")
    return None if found is None else found.group(1).replace('"', "")


def chain_gap(rows: Sequence[Sequence[Any]]) -> int | None:
    """The first revision missing from ``rows`` (each starting with its
    revision, oldest first, as a fold reads them), or ``None`` when they
    follow one another: every checkpoint after a snapshot is a delta on the
    one before it, so a hole means the fold would skip a step's changes."""
    expected = int(rows[0][0]) if rows else 0
    for row in rows:
        if int(row[0]) != expected:
            return expected
        expected += 1
    return None


def checkpoint_from_rows(run_id: str, revision: int, rows: Sequence[Sequence[Any]]) -> Checkpoint:
    """Fold ``checkpoints`` rows (revision, kind, status, step_id, created_at,
    state, steps, frontier, progress, error, meta, waits), oldest first from
    the nearest snapshot at or below ``revision``, into the checkpoint at
    ``revision``.

    Raises:
        CheckpointNotFoundError: the last row is not at ``revision`` (pruned
            or never saved).
        CheckpointCorruptError: a row between the snapshot and ``revision``
            is missing (``missing``: deleted outside Flowdesk; pruning
            deletes from the oldest row up, never between two kept ones).
        CheckpointDecodeError: a row's JSON is malformed.
    """
    if not rows or int(rows[-1][0]) != revision:
        raise CheckpointNotFoundError(
            f"run {run_id} has no checkpoint at revision {revision} (pruned or never saved)"
        )
    gap = chain_gap(rows)
    if gap is not None:
        raise CheckpointCorruptError(run_id, gap, missing=True)
    state: Mapping[str, Any] = {}
    steps: dict[str, StepRecord] = {}
    for rev, kind, _status, _sid, _at, state_json, steps_json, *_ in rows:
        try:
            delta = codec.loads(state_json)
            step_delta = codec.loads(steps_json)
            if not isinstance(delta, dict) or not isinstance(step_delta, dict):
                raise TypeError("state and steps must be JSON objects")
            state = delta if kind == "snapshot" else codec.apply_state_delta(state, delta)
            if kind == "snapshot":
                steps = {}
            for key, rec in step_delta.items():
                steps[key] = StepRecord.from_json({"step_id": key, **rec})
        except (ValueError, TypeError, KeyError) as exc:
            raise CheckpointDecodeError(run_id, int(rev), "", f"malformed record: {exc}") from exc
    last = rows[-1]
    try:
        frontier = tuple(codec.loads(last[7]))
        progress_raw = None if last[8] is None else codec.loads(last[8])
        meta = {} if last[10] is None else codec.loads(last[10])
        waits = () if last[11] is None else tuple(Wait.from_json(w) for w in codec.loads(last[11]))
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointDecodeError(run_id, revision, "", f"malformed record: {exc}") from exc
    progress = None if progress_raw is None else (int(progress_raw[0]), int(progress_raw[1]))
    return Checkpoint(
        run_id=run_id,
        revision=revision,
        status=last[2],
        state=state,
        steps=steps,
        frontier=frontier,
        created_at=float(last[4]),
        step_id=last[3],
        progress=progress,
        error=last[9],
        meta=meta,
        waits=waits,
    )


#: a word of SQL
_WORD = re.compile(r"[A-Za-z]+")
#: statements that end, open or split a transaction, by first word (SQLite's
#: and PostgreSQL's); ``START`` and ``PREPARE`` only before ``TRANSACTION``
_TX_CONTROL = frozenset(
    {"BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE", "ABORT", "START", "PREPARE"}
)


def _statement_start(sql: str, nested_comments: bool) -> int:
    """Where a single statement's first token starts: past whitespace,
    ``--`` comments and ``/* */`` comments (nested on PostgreSQL, not on
    SQLite, as each lexer reads them)."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace():
            i += 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif sql.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                elif nested_comments and sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                else:
                    i += 1
        else:
            break
    return i


def transaction_control(sql: str, *, nested_comments: bool) -> str | None:
    """The keyword(s) of ``sql`` when it is ONE statement that ends, opens or
    splits a transaction (``COMMIT``, ``END``, ``ROLLBACK``, ``BEGIN``,
    ``SAVEPOINT``, ``RELEASE``, ``ABORT``, ``START TRANSACTION``,
    ``PREPARE TRANSACTION``; any case, after comments), else None.

    ``sql`` must be a single statement as the database split it (apsw's
    execution tracer hands one; PostgreSQL's extended protocol refuses
    more): the first token of a statement decides its kind.
    ``nested_comments``: PostgreSQL's ``/* /* */ */``, not SQLite's."""
    found = _WORD.match(sql, _statement_start(sql, nested_comments))
    if found is None:
        return None
    first = found.group().upper()
    if first not in _TX_CONTROL:
        return None
    if first == "START":  # PostgreSQL's START TRANSACTION, its only START
        return "START TRANSACTION"
    if first == "PREPARE":  # PREPARE TRANSACTION ends it; PREPARE name AS does not
        rest = sql[found.end() :]
        second = _WORD.match(rest, _statement_start(rest, nested_comments))
        if second is None or second.group().upper() != "TRANSACTION":
            return None
        return "PREPARE TRANSACTION"
    return first
