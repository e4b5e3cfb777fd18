"""Conformance checks of DomainStore: domain SQL through SqlTx (the ``sql`` capability)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from desktop_app.errors import (
    DomainWriteError,
    QueryRefusedError,
    StoreError,
)
from desktop_app.store.conformance.helpers import (
    _cp,
    _eq,
    _id,
    _raises,
    _run,
)
from desktop_app.store.conformance.suite import ConformanceError, Harness, check
from desktop_app.store.protocol import (
    CheckpointStore,
)

#: The suite's own domain table, created by the checks through ``store.write``
#: (portable SQL): no table of the built-in flows is needed.
TABLE = "flowdesk_conformance_items"


def _items_table(s: CheckpointStore) -> None:
    s.write(
        lambda tx: tx.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE}(run_id TEXT NOT NULL, k TEXT NOT NULL, "
            "kind TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (run_id, k))"
        )
    )


def _put(rid: str, k: str, n: int = 1) -> Callable[[Any], None]:
    """A domain write: insert item ``k`` of run ``rid``, or add ``n`` to it (upsert)."""

    def write(tx: Any) -> None:
        tx.execute(
            f"INSERT INTO {TABLE}(run_id, k, kind, n) VALUES (?, ?, 'item', ?) "
            f"ON CONFLICT (run_id, k) DO UPDATE SET n = {TABLE}.n + excluded.n",
            (rid, k, n),
        )

    return write


def _items(rid: str) -> Callable[[Any], list[tuple[Any, ...]]]:
    """A domain query: ``(k, n)`` of run ``rid``'s items, by ``k``."""
    return lambda tx: [
        tuple(r) for r in tx.fetchall(f"SELECT k, n FROM {TABLE} WHERE run_id=? ORDER BY k", (rid,))
    ]


@check(
    "DomainStore.query", "DomainStore.write", "RunLog.append", "RunLog.create_run", needs=["sql"]
)
def domain_writes_commit_with_their_checkpoint(h: Harness) -> None:
    s = h.store()
    _items_table(s)
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0), writes=[_put(rid, "a")])
    s.append(_cp(rid, 1), writes=[_put(rid, "a", 2), _put(rid, "b")])
    _eq(h.store().query(_items(rid)), [("a", 3), ("b", 1)], "domain rows after two appends")
    s.write(_put(rid, "c", 5))
    _eq(h.store().query(_items(rid)), [("a", 3), ("b", 1), ("c", 5)], "a write() of its own")


@check("DomainStore.query", "DomainStore.write", needs=["sql"])
def query_is_read_only_and_write_is_atomic(h: Harness) -> None:
    s = h.store()
    _items_table(s)
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    refused = (
        "a domain query tried to write; query() is read-only. Run writes through "
        "store.write(op) (their own transaction) or as a step's ctx.write (with its "
        "checkpoint)."
    )
    with _raises(QueryRefusedError, "a write inside query()", refused):
        s.query(lambda tx: _put(rid, "x")(tx))
    _eq(s.query(_items(rid)), [], "the refused write left nothing")
    # a query of its own making fails the same way again (a step fails, not the run)
    with _raises(QueryRefusedError, "a query of a missing table"):
        s.query(lambda tx: tx.fetchall("SELECT 1 FROM no_such_table"))
    with _raises(QueryRefusedError, "a query naming a missing column"):
        s.query(lambda tx: tx.fetchall(f"SELECT no_such_column FROM {TABLE}"))
    _eq(s.query(_items(rid)), [], "a query after refused ones")
    # a server's data_version may move with other databases' commits (its
    # documented false positives): a query is read-only when, in one of the
    # tries, the version did not move across it; one that wrote moves it each
    # time. Tries for up to 30 s: a server busy with other tests' commits
    # rarely leaves a query's few milliseconds free of them (5 tries once all
    # moved in CI, then 100 did under a loaded run)
    moved: list[int] = []
    until = time.monotonic() + 30.0
    while not moved or (moved[-1] != 0 and time.monotonic() < until):
        seen = s.data_version()
        s.query(_items(rid))
        moved.append(s.data_version() - seen)
    _eq(moved[-1], 0, f"a read-only query is not a change (moved by {moved[-5:]}, last 5)")

    class Boom(Exception):
        pass

    def half(tx: Any) -> None:
        _put(rid, "x")(tx)
        raise Boom()

    with _raises(Boom, "an op that raises"):
        s.write(half)
    _eq(s.query(_items(rid)), [], "write() rolled back")
    s.write(_put(rid, "x"))
    changed = s.write(
        lambda tx: (
            tx.execute(
                f"UPDATE {TABLE} SET kind=? WHERE run_id=? AND k=?", ("e", rid, "x")
            ).rowcount
        )
    )
    _eq(changed, 1, "rowcount")
    sql = f"SELECT kind FROM {TABLE} WHERE run_id=? AND k=?"
    row = s.query(lambda tx: tx.fetchone(sql, (rid, "x")))
    _eq(tuple(row) if row else row, ("e",), "fetchone")
    row = h.store().query(lambda tx: tx.fetchone(sql, (rid, "x")))
    _eq(tuple(row) if row else row, ("e",), "write() committed")


@check("RunLog.append", needs=["sql"])
def a_failing_domain_write_aborts_the_append(h: Harness) -> None:
    s = h.store()
    _items_table(s)
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))

    def broken(tx: Any) -> None:
        tx.execute("INSERT INTO no_such_table VALUES (1)")

    try:
        s.append(_cp(rid, 1), writes=[_put(rid, "y"), broken])
    except DomainWriteError as exc:  # the step's write, never a conflict of the run
        _eq((exc.table, exc.constraint), ("no_such_table", None), "a missing table")
    else:
        raise ConformanceError("an append whose domain write fails: nothing was raised")
    _eq(s.get_run(rid).revision, 0, "nothing appended")
    _eq(s.query(_items(rid)), [], "the first domain write rolled back too")

    def no_kind(tx: Any) -> None:
        tx.execute(f"INSERT INTO {TABLE}(run_id, k, kind, n) VALUES (?, 'p', NULL, 1)", (rid,))

    try:
        s.append(_cp(rid, 1), writes=[_put(rid, "y"), no_kind])
    except DomainWriteError as exc:
        _eq(exc.table, TABLE, "the table of a broken constraint")
        _eq(exc.constraint is not None and not exc.retryable, True, "a constraint, final")
    else:
        raise ConformanceError("a domain write breaking NOT NULL: nothing was raised")
    _eq(s.get_run(rid).revision, 0, "nothing appended after a broken constraint")


@check("DomainStore.query", "DomainStore.write", unless=["sql"])
def without_sql_domain_calls_are_refused(h: Harness) -> None:
    s = h.store()
    rid = _id()
    with _raises(QueryRefusedError, "query() without the sql capability"):
        s.query(_items(rid))
    with _raises(StoreError, "write() without the sql capability"):
        s.write(_put(rid, "k"))
    with _raises(StoreError, "domain writes without the sql capability"):
        s.create_run(_run(rid), _cp(rid, 0), writes=[_put(rid, "p")])
