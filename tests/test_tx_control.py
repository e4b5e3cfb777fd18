"""A step's domain write cannot end, open or split the transaction its
checkpoint commits in: ``COMMIT``, ``END``, ``ROLLBACK``, ``BEGIN``,
``SAVEPOINT``, ``RELEASE`` (alone, in any case, after a comment, or after a
write in a multi-statement string) are refused with
:class:`TransactionControlError` before the database runs them, so the step
fails like any refused domain write and nothing of it is stored: neither its
completed revision nor its domain rows. Alone (one run) and in a group-commit
batch (several runs in flight), on a real SQLite file and on PostgreSQL.
Before, ``COMMIT`` committed the step's half-done transaction while the
append then raised "cannot commit - no transaction is active" (alone) or "no
such savepoint" (in a batch, after committing the earlier requests)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.errors import DomainWriteError, TransactionControlError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.rows import transaction_control

NOTES_TABLE = "CREATE TABLE notes(name TEXT UNIQUE, n INTEGER)"

#: domain statements that would end, open or split the transaction, and the
#: keyword the error names (None: refused otherwise, see _expect)
STATEMENTS = {
    "plain": ("COMMIT", "COMMIT"),
    "lowercase": ("commit", "COMMIT"),
    "end": ("end transaction", "END"),
    "after-comments": ("/* flush */ -- now\n  COMMIT", "COMMIT"),
    "multi": ("INSERT INTO notes(name, n) VALUES ('sneaked', 9); COMMIT", "COMMIT"),
    "rollback": ("ROLLBACK", "ROLLBACK"),
    "begin": ("BEGIN", "BEGIN"),
    "savepoint": ("SAVEPOINT mine", "SAVEPOINT"),
    "release": ("RELEASE SAVEPOINT mine", "RELEASE"),
    "rollback-to": ("ROLLBACK TO SAVEPOINT mine", "ROLLBACK"),
}

#: the flow is "fixed" by clearing this (the same flow, same version)
BAD: dict[str, str] = {}


class Note(BaseModel):
    name: str = ""
    prepared: bool = False
    saved: bool = False


def _insert(s: Note, ctx) -> dict:
    def write(tx) -> None:
        tx.execute("INSERT INTO notes(name, n) VALUES (?, 1)", (s.name,))
        bad = BAD.get(s.name)
        if bad is not None:
            tx.execute(bad)

    ctx.write(write)
    return {"saved": True}


NOTES_FLOW = (
    FlowBuilder("notes", Note)
    .step("prepare", lambda s: {"prepared": True})
    .step("insert", _insert, retry=2)  # a refused write is never retried
    .chain()
    .compile()
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request):
    """A real store with the `notes` domain table: a SQLite file in
    tmp_path, or a throwaway PostgreSQL database."""
    if request.param == "sqlite":
        from desktop_app.store.sqlite.store import open_store

        s = open_store(request.getfixturevalue("db_path"))
    else:
        from desktop_app.store.postgres.store import open_postgres_store

        s = open_postgres_store(request.getfixturevalue("pg_url"))
    s.write(lambda tx: tx.execute(NOTES_TABLE))
    BAD.clear()
    yield s
    BAD.clear()
    s.close()


def _names(store) -> list[str]:
    rows = store.query(lambda tx: tx.fetchall("SELECT name FROM notes ORDER BY name"))
    return [r[0] for r in rows]


def _expect(store, case: str) -> tuple[type[DomainWriteError], str]:
    """The error type and the words a refused ``case`` fails its step with.
    PostgreSQL runs one statement per ``execute`` (extended protocol): a
    multi-statement string is refused by the server before any of it runs
    (SQLSTATE 42601); SQLite hands each statement to Flowdesk's check."""
    word = STATEMENTS[case][1]
    postgres = store.query(lambda tx: tx.dialect) == "postgres"
    if case == "multi" and postgres:
        return DomainWriteError, "cannot insert multiple commands"
    return TransactionControlError, f"a domain write cannot end or open the transaction ({word}"


def _assert_nothing_of_the_step(store, engine, run_id: str, error_type: type, words: str) -> None:
    run = store.get_run(run_id)
    assert run.status == "failed" and run.lease_owner is None
    assert words in run.error
    latest = store.latest(run_id)
    rec = latest.steps["insert"]
    assert (rec.status, rec.error_type, rec.attempts) == ("failed", error_type.__name__, 1)
    assert latest.state["prepared"] is True and latest.state["saved"] is False
    # no revision of the run holds the step completed
    for info in engine.history(run_id):
        cp = store.get_checkpoint(run_id, info.revision)
        assert "insert" not in cp.steps or cp.steps["insert"].status != "completed"


@pytest.mark.scenario("S84")
@pytest.mark.parametrize("case", list(STATEMENTS))
def test_a_step_whose_domain_write_commits_fails_and_stores_nothing_of_it(store, case):
    engine = Engine(store, flows=[NOTES_FLOW], lease_ttl_s=30)
    assert engine.run("notes", Note(name="before")).status == "completed"  # COMMIT is cached
    BAD["bad"] = STATEMENTS[case][0]
    error_type, words = _expect(store, case)

    res = engine.run("notes", Note(name="bad"))

    assert res.status == "failed"
    _assert_nothing_of_the_step(store, engine, res.run_id, error_type, words)
    assert [c.revision for c in engine.history(res.run_id)] == [0, 1, 2]
    assert _names(store) == ["before"]  # neither "bad" nor "sneaked"
    # the store's own transactions still work, and the fixed flow resumes the run
    BAD.clear()
    assert engine.resume(res.run_id).status == "completed"
    assert _names(store) == ["bad", "before"]
    assert store.latest(res.run_id).steps["insert"].status == "completed"


@pytest.mark.scenario("S84")
@pytest.mark.parametrize("case", ["plain", "multi", "savepoint", "rollback-to", "release"])
def test_group_commit_refuses_a_commit_in_one_run_and_keeps_the_others(store, case):
    engine = Engine(store, flows=[NOTES_FLOW], lease_ttl_s=30)
    names = [f"note-{i:02d}" for i in range(12)]
    bad = {"note-03", "note-08"}
    for name in bad:
        BAD[name] = STATEMENTS[case][0]
    error_type, words = _expect(store, case)

    out = engine.run_many("notes", [Note(name=n) for n in names], max_workers=6)

    by_name = {}
    for o in out:
        assert not isinstance(o, BaseException), o
        by_name[store.latest(o.run_id).state["name"]] = o
    assert sorted(n for n, o in by_name.items() if o.status == "failed") == sorted(bad)
    assert all(o.status == "completed" for n, o in by_name.items() if n not in bad)
    for name in bad:
        _assert_nothing_of_the_step(store, engine, by_name[name].run_id, error_type, words)
    assert _names(store) == sorted(set(names) - bad)  # every good run's row, once
    BAD.clear()
    for name in sorted(bad):
        assert engine.resume(by_name[name].run_id).status == "completed"
    assert _names(store) == names


@pytest.mark.parametrize(
    ("sql", "sqlite", "postgres"),
    [
        ("COMMIT", "COMMIT", "COMMIT"),
        ("  commit;", "COMMIT", "COMMIT"),
        ("-- a\n/* b */ End Transaction", "END", "END"),
        ("/* /* */ COMMIT", "COMMIT", None),  # SQLite's comments do not nest, PostgreSQL's do
        ("/* /* */ */ COMMIT", None, "COMMIT"),  # SQLite: `*/ COMMIT` is a syntax error
        ("abort", "ABORT", "ABORT"),
        ("START TRANSACTION", "START TRANSACTION", "START TRANSACTION"),
        ("PREPARE TRANSACTION 'x'", "PREPARE TRANSACTION", "PREPARE TRANSACTION"),
        ("PREPARE q AS SELECT 1", None, None),
        ("INSERT INTO t VALUES ('COMMIT')", None, None),
        ("SELECT 1 AS commit", None, None),
        ("endless", None, None),
        ('"COMMIT"', None, None),
    ],
)
def test_transaction_control_reads_the_first_keyword(sql, sqlite, postgres):
    assert transaction_control(sql, nested_comments=False) == sqlite
    assert transaction_control(sql, nested_comments=True) == postgres


@pytest.mark.postgres
@pytest.mark.scenario("S84")
def test_postgres_refuses_a_commit_inside_a_do_block_as_a_domain_write_error(pg_url):
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(pg_url)
    try:
        store.write(lambda tx: tx.execute(NOTES_TABLE))
        engine = Engine(store, flows=[NOTES_FLOW], lease_ttl_s=30)
        BAD["bad"] = "DO $$ BEGIN INSERT INTO notes VALUES ('inner', 1); COMMIT; END $$"

        res = engine.run("notes", Note(name="bad"))

        assert res.status == "failed"
        _assert_nothing_of_the_step(store, engine, res.run_id, DomainWriteError, "SQLSTATE 2D000")
        assert _names(store) == []
        BAD.clear()
        assert engine.resume(res.run_id).status == "completed"
        assert _names(store) == ["bad"]
    finally:
        BAD.clear()
        store.close()
