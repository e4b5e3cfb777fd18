"""What the store cannot take ends the run with a record: a step whose
domain write breaks a constraint, meets a dropped table or carries a value
the store cannot encode fails its run (`failed`, the error saved in a
checkpoint, the lease released at once, earlier steps intact) instead of
leaving it `running` to fail the same way at every resume."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import DomainWriteError, PayloadNotStorableError, RevisionConflictError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.protocol import Checkpoint, RunRecord, StepRecord


class Note(BaseModel):
    name: str = ""
    n: int = 1
    prepared: bool = False
    saved: bool = False


NOTES_TABLE = (
    "CREATE TABLE notes(name TEXT CONSTRAINT notes_name_key UNIQUE, "
    "n INTEGER CONSTRAINT n_positive CHECK (n > 0))"
)


def _insert(s: Note, ctx) -> dict:
    ctx.write(lambda tx: tx.execute("INSERT INTO notes(name, n) VALUES (?, ?)", (s.name, s.n)))
    return {"saved": True}


NOTES_FLOW = (
    FlowBuilder("notes", Note)
    .step("prepare", lambda s: {"prepared": True})
    .step("insert", _insert, retry=2)  # a constraint violation is never retried
    .chain()
    .compile()
)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, pg_server):
    """A real store with the Flowdesk schema and the `notes` domain table: a
    SQLite file in tmp_path, or a throwaway PostgreSQL database."""
    if request.param == "sqlite":
        from desktop_app.store.sqlite.store import open_store

        s = open_store(request.getfixturevalue("db_path"))
    else:
        from desktop_app.store.postgres.store import open_postgres_store

        s = open_postgres_store(request.getfixturevalue("pg_url"))
    s.write(lambda tx: tx.execute(NOTES_TABLE))
    yield s
    s.close()


def _names(store) -> list[str]:
    return [
        r[0] for r in store.query(lambda tx: tx.fetchall("SELECT name FROM notes ORDER BY name"))
    ]


def _unique_name(store) -> str:
    """How the database names the UNIQUE constraint on notes.name (SQLite
    names a column constraint by its column)."""
    sqlite = store.query(lambda tx: tx.dialect) == "sqlite"
    return "notes.name" if sqlite else "notes_name_key"


@pytest.mark.scenario("S84")
@pytest.mark.parametrize("violation", ["unique", "check"])
def test_a_domain_write_that_breaks_a_constraint_fails_its_run_with_a_record(store, violation):
    engine = Engine(store, flows=[NOTES_FLOW], lease_ttl_s=30)
    assert engine.run("notes", Note(name="taken")).status == "completed"
    bad = Note(name="taken") if violation == "unique" else Note(name="fresh", n=0)
    constraint = _unique_name(store) if violation == "unique" else "n_positive"

    res = engine.run("notes", bad)

    assert res.status == "failed"
    run = store.get_run(res.run_id)
    assert run.status == "failed"
    assert (run.lease_owner, run.lease_expires_at) == (None, None)  # released at once
    assert "DomainWriteError" in run.error and "'notes'" in run.error
    assert f"{violation.upper()} constraint {constraint!r}" in run.error
    assert "already saved by another writer" not in run.error
    latest = store.latest(res.run_id)
    assert (latest.status, latest.error) == ("failed", run.error)  # `show` reads this
    rec = latest.steps["insert"]
    assert (rec.status, rec.error_type, rec.attempts) == ("failed", "DomainWriteError", 1)
    assert latest.steps["prepare"].status == "completed"  # earlier steps intact
    assert latest.state["prepared"] is True and latest.state["saved"] is False
    assert [c.revision for c in engine.history(res.run_id)] == [0, 1, 2]
    assert _names(store) == ["taken"]  # nothing of the failed step was written


@pytest.mark.scenario("S84")
def test_the_store_tells_a_domain_constraint_from_a_revision_conflict(store):
    run = RunRecord("r1", "notes", "v1", "running", 0, 1000.0, 1000.0)
    store.create_run(run, Checkpoint("r1", 0, "running", {"n": 0}, {}, ("a",), 1000.0))
    store.write(lambda tx: tx.execute("INSERT INTO notes(name, n) VALUES ('taken', 1)"))
    cp1 = Checkpoint(
        "r1", 1, "running", {"n": 1}, {"a": StepRecord("a", "completed")}, ("b",), 1001.0
    )

    def dup(tx) -> None:
        tx.execute("INSERT INTO notes(name, n) VALUES ('taken', 1)")

    with pytest.raises(DomainWriteError) as err:
        store.append(cp1, [dup])
    assert (err.value.table, err.value.constraint, err.value.kind) == (
        "notes",
        _unique_name(store),
        "unique",
    )
    assert err.value.retryable is False
    assert store.get_run("r1").revision == 0  # nothing of the append landed
    store.append(cp1)
    with pytest.raises(RevisionConflictError):  # the run's own tables: a conflict
        store.append(cp1)


@pytest.mark.scenario("S84")
def test_run_many_returns_every_outcome_when_one_write_breaks_a_unique(store):
    engine = Engine(store, flows=[NOTES_FLOW])
    states = [Note(name=f"note-{i:02d}") for i in range(15)]
    states.insert(7, Note(name="note-03"))  # the same name as run 3: one of them loses

    out = engine.run_many("notes", states, max_workers=8)

    assert len(out) == 16
    statuses = sorted(getattr(o, "status", type(o).__name__) for o in out)
    assert statuses == ["completed"] * 15 + ["failed"]
    failed = next(o for o in out if o.status == "failed")
    assert "DomainWriteError" in (failed.error or "")
    assert store.get_run(failed.run_id).lease_owner is None
    assert _names(store) == [f"note-{i:02d}" for i in range(15)]


# -- what the store cannot take: a dropped table, an unencodable value ---------


@pytest.mark.scenario("S84")
def test_start_tidy_after_its_table_was_dropped_fails_the_run_and_show_says_why(tmp_path):
    import json
    import sqlite3

    from tests.cli_support import flowdesk

    db, folder = tmp_path / "f.db", tmp_path / "Downloads"
    folder.mkdir()
    (folder / "photo.jpg").write_bytes(b"jpg")
    assert flowdesk(db, "db", "apply").returncode == 0
    with sqlite3.connect(db) as conn:  # behind Flowdesk's back, while no engine has it open
        conn.execute("DROP TABLE tidy_moves")
    conn.close()

    started = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(folder)}))

    assert started.returncode == 1, started.stderr
    assert "Traceback" not in started.stderr
    run_id = started.stdout.splitlines()[0]
    assert started.stdout.splitlines()[-1] == f"run {run_id} failed"
    assert "DomainReadError" in started.stderr and "'tidy_moves'" in started.stderr
    shown = flowdesk(db, "show", "--json", run_id)
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout)
    assert (run["status"], run["lease_owner"]) == ("failed", None)
    assert "has no table tidy_moves, which Flowdesk's schema creates" in run["error"]
    assert [(s["step_id"], s["status"]) for s in run["steps"]] == [("plan", "failed")]
    assert [c["status"] for c in run["checkpoints"]] == ["running", "failed"]
    # its files cannot be read: show says so and still shows the run
    assert run["files"] is None and "has no table tidy_moves" in run["files_error"]
    text = flowdesk(db, "show", run_id)
    assert text.returncode == 0, text.stderr
    assert "files: cannot be read (" in text.stdout and "failed" in text.stdout


@pytest.mark.scenario("S58")
@pytest.mark.parametrize("where", ["state", "domain write"])
def test_a_lone_surrogate_fails_the_run_naming_the_field(store, where):
    """A name from ``os.listdir`` of a file whose name is not UTF-8 holds a
    lone surrogate ('\\udcff'): no store can encode it."""
    bad = "report-\udcff.txt"

    def found(s: Note, ctx) -> dict:
        if where == "domain write":
            ctx.write(lambda tx: tx.execute("INSERT INTO notes(name, n) VALUES (?, 1)", (bad,)))
            return {"saved": True}
        return {"name": bad}

    flow = FlowBuilder("listing", Note).step("prepare", lambda s: {"prepared": True})
    flow = flow.step("found", found, retry=2).chain().compile()
    engine = Engine(store, flows=[flow])

    res = engine.run("listing", Note(name="ok"))

    assert res.status == "failed"
    run = store.get_run(res.run_id)
    assert (run.revision, run.lease_owner) == (2, None)
    expected = "StateNotStorableError" if where == "state" else "DomainWriteError"
    latest = store.latest(res.run_id)
    assert latest.steps["found"].error_type == expected
    assert latest.steps["found"].attempts == 1  # not retried: the same value fails the same way
    if where == "state":
        assert "state field 'name'" in run.error
    else:
        assert "'notes'" in run.error
    assert latest.state["name"] == "ok" and latest.steps["prepare"].status == "completed"
    assert _names(store) == []


# -- payloads no checkpoint could hold are refused at the door ---------------


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


class Waiter(BaseModel):
    got: Any = None
    done: bool = False


WAIT_FLOW = (
    FlowBuilder("waiter", Waiter)
    .wait_signal("wait", "go", "k", into="got")
    .step("after", lambda s: {"done": True})
    .chain()
    .compile()
)


@pytest.mark.scenario("S84")
def test_signal_publish_and_answer_refuse_a_payload_no_checkpoint_could_hold(db_path):
    from desktop_app.store.sqlite.store import open_store

    store = open_store(db_path)
    engine = Engine(store, flows=[WAIT_FLOW])
    run_id = engine.run("waiter", Waiter()).run_id
    deep = _nested(900)
    with pytest.raises(PayloadNotStorableError, match="signal 'go' payload"):
        engine.signal("go", "k", deep)
    with pytest.raises(PayloadNotStorableError, match="event 'ev' payload"):
        engine.publish("ev", deep)
    with pytest.raises(PayloadNotStorableError, match="cannot be stored"):
        engine.signal("go", "k", {"name": "bad\udcff"})
    assert store.next_signal("go", "k") is None  # nothing was stored
    run = store.get_run(run_id)
    assert (run.status, run.revision) == ("waiting", 1)
    engine.signal("go", "k", _nested(100))  # deep, but storable: delivered
    assert store.get_run(run_id).status == "completed"
    store.close()


@pytest.mark.scenario("S84")
def test_a_stored_payload_a_wait_cannot_take_is_refused_with_the_reason(db_path):
    from desktop_app.store.sqlite.store import open_store

    store = open_store(db_path)
    engine = Engine(store, flows=[WAIT_FLOW])
    run_id = engine.run("waiter", Waiter()).run_id
    # stored before signals were checked (or by another writer): the wait meets it
    bad = store.send_signal("go", "k", _nested(900), engine.clock.now())

    res = engine.resume(run_id)

    assert res.status == "waiting"  # refused: the run waits for a signal it can take
    run = store.get_run(run_id)
    assert (run.status, run.lease_owner, run.error) == ("waiting", None, None)
    refused = store.latest(run_id).meta["refused_signals"]
    assert [r["signal"] for r in refused] == [bad]
    assert "cannot be stored: Maximum serialization depth exceeded" in refused[0]["reason"]
    assert store.signal_consumer(bad) == f"{run_id}:wait:0"  # no wait meets it again
    assert engine.resume(run_id).status == "waiting"  # nor fails on it at every resume
    engine.signal("go", "k", _nested(100))
    assert store.get_run(run_id).status == "completed"
    store.close()


@pytest.mark.scenario("S84")
def test_cli_signal_and_answer_refuse_an_unstorable_payload_with_exit_2(tmp_path):
    import json

    from tests.cli_support import flowdesk

    db, folder = tmp_path / "f.db", tmp_path / "Downloads"
    folder.mkdir()
    (folder / "photo.jpg").write_bytes(b"jpg")
    assert flowdesk(db, "db", "apply").returncode == 0
    deep = json.dumps(_nested(900))

    sent = flowdesk(db, "signal", "go", "k", "--payload", deep)

    assert sent.returncode == 2, sent.stderr
    assert sent.stdout == ""
    assert len(sent.stderr.strip().splitlines()) == 1
    assert "signal 'go' payload cannot be stored" in sent.stderr
    assert "nothing was sent" in sent.stderr
    started = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(folder)}))
    run_id = started.stdout.splitlines()[0]
    answered = flowdesk(db, "answer", run_id, "--value-json", deep)
    assert answered.returncode == 2, answered.stderr
    assert len(answered.stderr.strip().splitlines()) == 1
    assert "answer for run" in answered.stderr and "cannot be stored" in answered.stderr
    assert json.loads(flowdesk(db, "show", "--json", run_id).stdout)["status"] == "waiting"


def test_a_step_breaking_a_deferred_foreign_key_fails_its_run_with_a_record(db_path):
    """A domain table whose foreign key is ``DEFERRABLE INITIALLY DEFERRED``
    is checked at ``COMMIT``, after every statement of the step's append
    went through: SQLite then refuses the commit with a FOREIGN KEY
    constraint error. It is the step's write (DomainWriteError: the run
    fails with the reason), not "already saved by another writer" (a lost
    compare-and-append, which left the run running for its next resume to
    fail the same way)."""
    from desktop_app.store.sqlite.store import open_store

    store = open_store(db_path)
    store.write(
        lambda tx: tx.execute(
            "CREATE TABLE owners(id INTEGER PRIMARY KEY); CREATE TABLE pets("
            "owner INTEGER REFERENCES owners(id) DEFERRABLE INITIALLY DEFERRED)"
        )
    )

    def adopt(s: Note, ctx) -> dict:
        ctx.write(lambda tx: tx.execute("INSERT INTO pets(owner) VALUES (?)", (s.n,)))
        return {"saved": True}

    flow = FlowBuilder("pets", Note).step("adopt", adopt).chain().compile()
    engine = Engine(store, flows=[flow], lease_ttl_s=30)
    res = engine.run("pets", Note(n=7))  # no owner 7

    assert res.status == "failed"
    run = store.get_run(res.run_id)
    assert (run.status, run.lease_owner) == ("failed", None)
    assert "DomainWriteError" in run.error and "FOREIGN KEY" in run.error
    assert "already saved by another writer" not in run.error
    rec = store.latest(res.run_id).steps["adopt"]
    assert (rec.status, rec.error_type, rec.attempts) == ("failed", "DomainWriteError", 1)
    assert store.query(lambda tx: tx.fetchall("SELECT owner FROM pets")) == []
    store.write(lambda tx: tx.execute("INSERT INTO owners(id) VALUES (7)"))
    assert engine.run("pets", Note(n=7)).status == "completed"  # with its owner it commits
    store.close()
