"""Contract of ``append_batch`` (group commit), run against every store that
has it: one transaction for the batch, each run's part exact, one run's
conflict, lost lease or failing domain write rolls back that run only.

``store_factory`` makes a fresh store: in memory, SQLite, PostgreSQL (a
fresh database per test; skips without a server, fails under CI=true).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from desktop_app.errors import DomainWriteError, LeaseLostError, RevisionConflictError, StoreError
from desktop_app.flow.state import StepRecords
from desktop_app.store.group_commit import AppendRequest, BatchAppender
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.protocol import Checkpoint, Intent, Lease, RunRecord, StepRecord

StoreFactory = Callable[[], object]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    made: list[object] = []

    def make() -> object:
        if request.param == "memory":
            s: object = InMemoryCheckpointStore()
        elif request.param == "postgres":
            from desktop_app.store.postgres.store import open_postgres_store

            s = open_postgres_store(request.getfixturevalue("pg_url"))
        else:
            from desktop_app.store import migrations
            from desktop_app.store.connection import open_connection
            from desktop_app.store.sqlite.store import open_store

            path = tmp_path / f"batch{len(made)}.db"
            conn = open_connection(path)
            migrations.apply(conn)
            conn.close()
            s = open_store(path)
        made.append(s)
        return s

    yield make
    for s in made:
        close = getattr(s, "close", None)
        if close is not None:
            close()


def _run(run_id: str, owner: str | None = None) -> RunRecord:
    return RunRecord(
        run_id,
        "f",
        "v1",
        "running",
        0,
        1000.0,
        1000.0,
        lease_owner=owner,
        lease_expires_at=None if owner is None else 5000.0,
    )


def _cp(run_id: str, rev: int, steps: Mapping[str, StepRecord] | None = None, **kw) -> Checkpoint:
    return Checkpoint(
        run_id,
        rev,
        kw.pop("status", "running"),
        kw.pop("state", {"n": rev}),
        steps if steps is not None else {"a": StepRecord("a", "in_progress", attempts=1)},
        ("a",),
        1000.0 + rev,
        **kw,
    )


def _seed(store, *run_ids: str, owner: str | None = None) -> None:
    for rid in run_ids:
        store.create_run(_run(rid, owner), _cp(rid, 0))


def test_every_store_offers_append_batch(store_factory):
    assert isinstance(store_factory(), BatchAppender)


def test_a_batch_appends_every_run(store_factory):
    store = store_factory()
    _seed(store, "r1", "r2", "r3")
    out = store.append_batch([AppendRequest(_cp(r, 1, state={"n": r})) for r in ("r1", "r2", "r3")])
    assert out == [None, None, None]
    for r in ("r1", "r2", "r3"):
        assert store.get_run(r).revision == 1
        assert store.latest(r).state == {"n": r}


@pytest.mark.scenario("S71")
def test_a_conflict_in_one_run_leaves_the_others_committed(store_factory):
    store = store_factory()
    _seed(store, "r1", "r2", "r3")
    out = store.append_batch(
        [
            AppendRequest(_cp("r1", 1)),
            AppendRequest(_cp("r2", 2)),  # not latest + 1: a stale writer
            AppendRequest(_cp("r3", 1)),
        ]
    )
    assert out[0] is None and out[2] is None
    assert isinstance(out[1], RevisionConflictError)
    assert [store.get_run(r).revision for r in ("r1", "r2", "r3")] == [1, 0, 1]
    assert [c.revision for c in store.history("r2")] == [0]


def test_a_lost_lease_fails_only_that_run(store_factory):
    store = store_factory()
    _seed(store, "mine")
    _seed(store, "theirs", owner="other-process")
    me = Lease("me", 2000.0, 1001.0)
    out = store.append_batch(
        [AppendRequest(_cp("mine", 1), lease=me), AppendRequest(_cp("theirs", 1), lease=me)]
    )
    assert out[0] is None
    assert isinstance(out[1], LeaseLostError)
    assert store.get_run("mine").lease_owner == "me"
    theirs = store.get_run("theirs")
    assert (theirs.revision, theirs.lease_owner) == (0, "other-process")


@pytest.mark.scenario("S71")
def test_a_duplicate_intent_in_one_run_rolls_back_only_that_run(store_factory):
    store = store_factory()
    _seed(store, "r1", "r2")
    store.append(_cp("r1", 1), intents=[Intent("k1", "r1", "a", "dest", {"x": 1})])
    out = store.append_batch(
        [
            AppendRequest(_cp("r1", 2), intents=[Intent("k1", "r1", "a", "dest", {"x": 2})]),
            AppendRequest(_cp("r2", 1), intents=[Intent("k2", "r2", "a", "dest", {"y": 1})]),
        ]
    )
    assert isinstance(out[0], RevisionConflictError)
    assert out[1] is None
    assert store.get_run("r1").revision == 1
    pending = {i.intent_id: i.payload for i in store.intents(["pending"])}
    assert pending == {"k1": {"x": 1}, "k2": {"y": 1}}


def test_two_revisions_of_one_run_in_one_batch_commit_in_order(store_factory):
    store = store_factory()
    _seed(store, "r1")
    out = store.append_batch([AppendRequest(_cp("r1", 1)), AppendRequest(_cp("r1", 2))])
    assert out == [None, None]
    assert [c.revision for c in store.history("r1")] == [0, 1, 2]
    assert store.latest("r1").state == {"n": 2}


def test_changed_steps_hint_reads_back_every_record(store_factory):
    """The writer names the records it touched; reading back folds them onto
    the earlier ones, also when the records come as shared layers."""
    store = store_factory()
    _seed(store, "r1")
    records = StepRecords({"a": StepRecord("a", "in_progress", attempts=1)})
    for rev in range(1, 80):  # past a flatten of the layers
        prev = f"s{rev - 1}" if rev > 1 else "a"
        records[prev] = StepRecord(prev, "completed", attempts=1, finished_at=float(rev))
        records[f"s{rev}"] = StepRecord(f"s{rev}", "in_progress", attempts=1)
        steps, changed = records.snapshot()
        assert changed == {prev, f"s{rev}"}
        # a record overwritten in the top layer is counted once, a new one added
        assert len(steps) == rev + 1 == len(dict(steps)) == len(records)
        out = store.append_batch([AppendRequest(_cp("r1", rev, steps), changed_steps=changed)])
        assert out == [None]
        records.stored(changed)
        assert store.latest("r1").steps == dict(steps)
    if hasattr(store, "conn"):  # SQLite: a fresh read folds the stored deltas
        store._last.clear()
        assert store.latest("r1").steps == dict(records)
        assert store.get_checkpoint("r1", 40).steps["s39"].status == "completed"


def test_domain_write_failure_rolls_back_only_its_run(store_factory):
    store = store_factory()
    if "sql" not in store.capabilities:
        # the in-memory store refuses domain writes: that run's slot says so
        _seed(store, "r1", "r2")
        out = store.append_batch(
            [AppendRequest(_cp("r1", 1), writes=[lambda c: None]), AppendRequest(_cp("r2", 1))]
        )
        assert isinstance(out[0], StoreError) and out[1] is None
        assert [store.get_run(r).revision for r in ("r1", "r2")] == [0, 1]
        return
    store.write(lambda c: c.execute("CREATE TABLE effects(run_id TEXT, what TEXT)"))
    _seed(store, "r1", "r2", "r3")

    def ok(run_id: str):
        return lambda c: c.execute("INSERT INTO effects VALUES (?, 'ok')", (run_id,))

    def half_then_fail(c) -> None:
        c.execute("INSERT INTO effects VALUES ('r2', 'half')")
        raise ValueError("the domain rejected it")

    out = store.append_batch(
        [
            AppendRequest(_cp("r1", 1), writes=[ok("r1")]),
            AppendRequest(_cp("r2", 1), writes=[half_then_fail]),
            AppendRequest(_cp("r3", 1), writes=[ok("r3")]),
        ]
    )
    assert out[0] is None and out[2] is None
    assert isinstance(out[1], DomainWriteError) and isinstance(out[1].__cause__, ValueError)
    assert out[1].table == "effects"
    rows = store.query(lambda c: c.execute("SELECT run_id, what FROM effects").fetchall())
    assert sorted(map(tuple, rows)) == [("r1", "ok"), ("r3", "ok")]
    assert [store.get_run(r).revision for r in ("r1", "r2", "r3")] == [1, 0, 1]
    # the failed run can still append its revision 1 afterwards
    assert store.append_batch([AppendRequest(_cp("r2", 1))]) == [None]


@pytest.mark.parametrize(
    "statement",
    ["COMMIT", "commit", "/* x */ END", "SAVEPOINT mine", "RELEASE SAVEPOINT mine", "ROLLBACK"],
)
def test_a_domain_write_that_commits_is_refused_and_rolls_back_only_its_run(
    store_factory, statement
):
    """A COMMIT (or any transaction control) in one request's domain write
    used to commit the batch's earlier requests and fail the batch with "no
    such savepoint": it is refused before it runs, that run's slot holds the
    TransactionControlError, the others commit."""
    from desktop_app.errors import TransactionControlError

    store = store_factory()
    if "sql" not in store.capabilities:
        return  # the in-memory store takes no domain writes (see above)
    store.write(lambda c: c.execute("CREATE TABLE effects(run_id TEXT, what TEXT)"))
    _seed(store, "r1", "r2", "r3")

    def ok(run_id: str):
        return lambda c: c.execute("INSERT INTO effects VALUES (?, 'ok')", (run_id,))

    def half_then_commit(c) -> None:
        c.execute("INSERT INTO effects VALUES ('r2', 'half')")
        c.execute(statement)

    out = store.append_batch(
        [
            AppendRequest(_cp("r1", 1), writes=[ok("r1")]),
            AppendRequest(_cp("r2", 1), writes=[half_then_commit]),
            AppendRequest(_cp("r3", 1), writes=[ok("r3")]),
        ]
    )
    assert out[0] is None and out[2] is None
    assert isinstance(out[1], TransactionControlError)
    assert "a domain write cannot end or open the transaction" in str(out[1])
    rows = store.query(lambda c: c.execute("SELECT run_id, what FROM effects").fetchall())
    assert sorted(map(tuple, rows)) == [("r1", "ok"), ("r3", "ok")]
    assert [store.get_run(r).revision for r in ("r1", "r2", "r3")] == [1, 0, 1]
    assert store.append_batch([AppendRequest(_cp("r2", 1), writes=[ok("r2")])]) == [None]
