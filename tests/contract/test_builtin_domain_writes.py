"""The built-in flows' domain SQL (digest, tidy) on every store with the
``sql`` capability, and the packaged conformance suite on a database that
has no table of the built-in flows (what a third-party backend has).

``builtin_domain_writes`` was a check of the packaged suite; it moved here
(unchanged in what it asserts) so the suite needs only the store's schema.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_app.store import conformance
from desktop_app.store.conformance import _cp, _run
from desktop_app.store.domain import digest, tidy
from desktop_app.store.protocol import CheckpointStore


def test_builtin_domain_writes(store: CheckpointStore) -> None:
    if "sql" not in store.capabilities:
        pytest.skip("the in-memory store has no domain SQL (no sql capability)")
    s = store
    rid = "builtin-domain-run"
    f = digest.DigestFile("a.md", "markdown", "A", "sum", 10)
    s.create_run(_run(rid, flow="digest"), _cp(rid, 0), writes=[digest.record_file(rid, f)])
    s.append(_cp(rid, 1), writes=[digest.record_file(rid, f)])
    (row,) = s.query(digest.files_of_run(rid))
    assert (row.path, row.title, row.times_processed) == ("a.md", "A", 2)  # upsert bumps it
    moves = [tidy.TidyMove(f"/d/{n}", f"/d/X/{n}", "other", "2025-01") for n in ("a", "b", "c")]
    s.append(_cp(rid, 2), writes=[tidy.record_plan(rid, moves)])
    s.append(_cp(rid, 3), writes=[tidy.record_plan(rid, moves)])  # a re-run replaces its rows
    nxt = s.query(tidy.next_planned(rid))
    assert (nxt.src if nxt else None) == "/d/a"
    s.append(
        _cp(rid, 4),
        writes=[tidy.mark_queued(rid, "/d/a", "key-a"), tidy.mark_queued(rid, "/d/b", "key-b")],
    )
    s.append(_cp(rid, 5), writes=[tidy.skip_planned(rid, "not approved")])
    s.write(tidy.record_outcome("key-a", True))
    s.write(tidy.record_outcome("key-b", False, "link", status="refused"))
    s.write(tidy.record_outcome("key-a", False, "late"))  # moved stays moved
    got = {m.src: (m.status, m.reason) for m in s.query(tidy.moves_of_run(rid))}
    assert got == {
        "/d/a": ("moved", None),
        "/d/b": ("refused", "link"),
        "/d/c": ("skipped", "not approved"),
    }
    by_key = s.query(tidy.move_by_key("key-b"))
    assert (by_key.status if by_key else None) == "refused"
    assert s.query(tidy.move_by_key("nope")) is None


@pytest.mark.slow
def test_the_suite_runs_on_a_store_without_the_builtin_flows_tables(tmp_path: Path) -> None:
    """A SQLite database with the store's schema only (the built-in flows'
    tables dropped) passes every check: the suite brings its own table."""
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
    from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store

    made = iter(range(1000))

    def make() -> conformance.Harness:
        path = tmp_path / f"bare-{next(made)}.db"
        conn = open_connection(path)
        migrations.apply(conn)
        for table in ("digest_files", "tidy_moves"):
            conn.execute(f"DROP TABLE {table}")
        conn.close()

        def agent_log(s: CheckpointStore) -> SqliteAgentStore:
            assert isinstance(s, SqliteCheckpointStore)
            return SqliteAgentStore(s)

        return conformance.Harness(
            lambda clock=None: open_store(path, clock=clock),
            SqliteCheckpointStore.capabilities,
            agent_log=agent_log,
        )

    assert conformance.validate(make) == []
