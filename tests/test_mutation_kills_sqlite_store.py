"""More of the SQLite store's guarantees (desktop_app/store/sqlite/store.py),
each on a real file, written for the mutants its 2026-12-04 run left alive.

A step's domain write that fails is a :class:`DomainWriteError` whose kind,
constraint, table and message say what the database refused (also when the
statement does not name the table, or the write's own code raised); and
nothing of the step is saved. A run is claimed by one owner at a time, in
the order and number asked (``claim``, ``renew``, ``claim_runnable``), and an
outbox intent is handed to one dispatcher at a time, marked as it moves and
withdrawn only when no live dispatcher is sending it (these methods were
first mutated once ``_locked`` stopped being a decorator, which mutmut skips).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import apsw
import pytest

from desktop_app.errors import (
    CheckpointNotFoundError,
    DiskFullError,
    DomainWriteError,
    DuplicateFlowKeyError,
    RevisionConflictError,
    RunLeasedError,
    StateNotStorableError,
    StoreError,
)
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import Intent, Lease, RunRecord, StepRecord, Wait
from desktop_app.store.sqlite.store import SqliteCheckpointStore, _locked, open_store
from tests.power_loss_vfs import PowerLossVFS, wal_size
from tests.test_mutation_kills_sqlite import T0, _cp, _run

_DOMAIN = """
CREATE TABLE notes(
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    n INTEGER CONSTRAINT n_positive CHECK (n > 0),
    parent INTEGER REFERENCES notes(id)
);
CREATE TABLE scores(x REAL CHECK (x > 0.5));
CREATE TABLE versions("v.2" TEXT UNIQUE);
INSERT INTO versions VALUES ('x');
CREATE TABLE guarded(word TEXT);
CREATE TRIGGER guarded_words BEFORE INSERT ON guarded WHEN new.word = 'no'
BEGIN SELECT RAISE(ABORT, 'word check failed: rule failed: no'); END;
"""


def _with_domain(store: SqliteCheckpointStore) -> SqliteCheckpointStore:
    def create(tx: Any) -> None:
        for statement in _DOMAIN.split(";\n"):
            if statement.strip():
                tx.execute(statement)

    store.write(create)
    store.write(lambda tx: tx.execute("INSERT INTO notes(id, name, n) VALUES (1, 'taken', 1)"))
    store.create_run(_run(), _cp("r1", 0, {"n": 0}))
    return store


def _refused(store: SqliteCheckpointStore, write: Callable[[Any], None]) -> DomainWriteError:
    """Append revision 1 with ``write``; it must fail and save nothing."""
    with pytest.raises(DomainWriteError) as err:
        store.append(_cp("r1", 1, {"n": 1}), [write])
    assert store.get_run("r1").revision == 0
    assert store.query(lambda tx: tx.fetchall("SELECT name FROM notes")) == [("taken",)]
    return err.value


def _fields(err: DomainWriteError) -> tuple[str | None, str | None, str | None]:
    return err.table, err.constraint, err.kind


# -- a domain write the database refuses --------------------------------------


def test_a_unique_violation_names_its_column_and_says_what_to_fix(sqlite_store):
    s = _with_domain(sqlite_store)
    err = _refused(s, lambda tx: tx.execute("INSERT INTO notes(name, n) VALUES ('taken', 2)"))
    assert _fields(err) == ("notes", "notes.name", "unique")
    assert str(err) == (
        "the step's domain write violates UNIQUE constraint 'notes.name' of table 'notes' "
        "(UNIQUE constraint failed: notes.name); nothing of the step was saved. "
        "Fix the step's write or the rows it conflicts with, then resume the run"
    )


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("INSERT INTO notes(name, n) VALUES ('taken', 2)", ("notes", "notes.name", "unique")),
        ("INSERT INTO notes(id, name, n) VALUES (1, 'x', 2)", ("notes", "notes.id", "primary key")),
        ("INSERT INTO notes(name, n) VALUES (NULL, 2)", ("notes", "notes.name", "not null")),
        ("INSERT INTO versions(\"v.2\") VALUES ('x')", ("versions", "versions.v.2", "unique")),
    ],
    ids=["unique", "primary key", "not null", "a column with a dot"],
)
def test_a_statement_that_does_not_name_its_table_gets_it_from_the_constraint(
    sqlite_store, sql, expected
):
    """A write that starts with a CTE (``WITH … INSERT``) does not name its
    table where the store looks; SQLite's message (``table.column``) does."""
    s = _with_domain(sqlite_store)
    err = _refused(s, lambda tx: tx.execute(f"WITH v(z) AS (VALUES (1)) {sql}"))
    assert _fields(err) == expected


def test_a_check_names_its_constraint_and_the_table_the_statement_wrote(sqlite_store):
    s = _with_domain(sqlite_store)
    err = _refused(s, lambda tx: tx.execute("INSERT INTO notes(name, n) VALUES ('new', 0)"))
    assert _fields(err) == ("notes", "n_positive", "check")
    assert "violates CHECK constraint 'n_positive' of table 'notes'" in str(err)


def test_a_check_expression_with_a_dot_is_not_taken_for_a_table(sqlite_store):
    """An unnamed CHECK is named by its expression (``x > 0.5``): its dot is
    no ``table.column``; the table is the one the statement wrote."""
    s = _with_domain(sqlite_store)
    err = _refused(s, lambda tx: tx.execute("INSERT INTO scores(x) VALUES (0.1)"))
    assert _fields(err) == ("scores", "x > 0.5", "check")


def test_a_check_in_a_batch_of_rows_names_the_table_of_executemany(sqlite_store):
    s = _with_domain(sqlite_store)
    err = _refused(
        s,
        lambda tx: tx.executemany(
            "INSERT INTO notes(name, n) VALUES (?, ?)", [("a", 1), ("b", -1)]
        ),
    )
    assert _fields(err) == ("notes", "n_positive", "check")


def test_a_foreign_key_without_a_name_is_named_by_its_kind(sqlite_store):
    s = _with_domain(sqlite_store)
    err = _refused(
        s, lambda tx: tx.execute("INSERT INTO notes(name, n, parent) VALUES ('child', 1, 99)")
    )
    assert _fields(err) == ("notes", "FOREIGN KEY", "foreign key")
    assert str(err).startswith(
        "the step's domain write violates FOREIGN KEY constraint 'FOREIGN KEY' of table "
        "'notes' (FOREIGN KEY constraint failed); nothing of the step was saved."
    )


def test_a_trigger_that_refuses_a_row_is_another_kind_of_constraint(sqlite_store):
    """A trigger's ``RAISE(ABORT, …)`` is a constraint of no listed kind: the
    constraint is what follows the message's first " failed: "."""
    s = _with_domain(sqlite_store)
    err = _refused(s, lambda tx: tx.execute("INSERT INTO guarded(word) VALUES ('no')"))
    assert _fields(err) == ("guarded", "rule failed: no", "other")
    assert "violates OTHER constraint 'rule failed: no' of table 'guarded'" in str(err)


def test_a_missing_table_is_a_failed_write_with_sqlites_reason(sqlite_store):
    s = _with_domain(sqlite_store)
    err = _refused(s, lambda tx: tx.execute("INSERT INTO nowhere(x) VALUES (1)"))
    assert _fields(err) == ("nowhere", None, None)
    assert str(err) == (
        "the step's domain write into table 'nowhere' failed (no such table: nowhere); "
        "nothing of the step was saved. Fix the step's write or its table (was it dropped "
        "or altered?), then resume the run"
    )


def test_a_write_whose_own_code_raises_names_the_error_and_its_type(sqlite_store):
    s = _with_domain(sqlite_store)

    def broken(tx: Any) -> None:
        tx.execute("INSERT INTO notes(name, n) VALUES ('fresh', 1)")
        raise ValueError("no amount given")

    err = _refused(s, broken)
    assert _fields(err) == ("notes", None, None)
    assert "(ValueError: no amount given)" in str(err)


# -- the row checksum of values orjson would write differently ------------------


def test_a_time_far_from_now_is_checksummed_by_the_same_json_rule(db_path):
    """A checkpoint time Python prints with an exponent (a test clock near
    the epoch, 5e-05 s; or 1e17 s) is hashed as the standard library's
    compact JSON writes it (``5e-05``, ``1e+17``), the rule every version
    verifies rows with, and the run still loads."""
    s = open_store(db_path)
    s.create_run(_run(), replace(_cp("r1", 0, {"note": "café ✓"}), created_at=5e-05))
    s.append(replace(_cp("r1", 1, {"note": "thé"}), created_at=1e17))
    s.close()
    conn = open_connection(db_path)
    try:
        rows = conn.execute(
            "SELECT run_id, revision, kind, status, step_id, created_at, state, steps, "
            "frontier, progress, error, meta, waits, checksum FROM checkpoints ORDER BY revision"
        ).fetchall()
    finally:
        conn.close()
    assert [r[5] for r in rows] == [5e-05, 1e17]
    for row in rows:
        text = json.dumps(list(row[:-1]), ensure_ascii=False, separators=(",", ":"))
        assert row[-1] == hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()
    s = open_store(db_path)
    assert s.get_checkpoint("r1", 0).state == {"note": "café ✓"}
    assert s.latest("r1").state == {"note": "thé"}
    s.close()


# -- claiming runnable runs ------------------------------------------------------


def _make(store: SqliteCheckpointStore, run_id: str, flow: str, at: float, **kw: Any) -> None:
    run = RunRecord(run_id, flow, "v1", "pending", 0, at, at, **kw)
    store.create_run(run, replace(_cp(run_id, 0, {}, status="pending"), created_at=at))


def test_a_claim_restricted_to_two_flows_takes_the_runs_of_both_only(sqlite_store):
    s = sqlite_store
    for i, flow in enumerate(["alpha", "gamma", "beta", "alpha"]):
        _make(s, f"r{i}", flow, T0 + i)
    got = s.claim_runnable("me", 30.0, flows=["alpha", "beta"], now=T0 + 10)
    assert [r.run_id for r in got] == ["r0", "r2", "r3"]
    assert {r.run_id: r.lease_owner for r in s.list_runs()} == {
        "r0": "me",
        "r1": None,
        "r2": "me",
        "r3": "me",
    }


def test_a_claim_pages_past_runs_a_live_owner_holds_to_the_free_ones_behind(db_path):
    """With liveness given (``presumed_alive``) the claim reads every run of
    the status and skips those a live owner holds, a page at a time: the
    first page (``limit`` rows) holds one free run, the next 64 none, and
    the last two free runs come after them. Each is handed out once."""
    s = open_store(db_path, synchronous="OFF")
    held = {"lease_owner": "other", "lease_expires_at": T0 + 1_000}
    free = {2, 68, 69}
    s.append_batch(
        [
            AppendRequest(
                replace(_cp(f"r{i:02}", 0, {}, status="pending"), created_at=T0 + i),
                run=RunRecord(
                    f"r{i:02}", "flow", "v1", "pending", 0, T0 + i, T0 + i,
                    **({} if i in free else held),
                ),
            )
            for i in range(70)
        ]
    )  # fmt: skip
    got = s.claim_runnable("me", 30.0, limit=3, presumed_alive=lambda owner: True, now=T0 + 100)
    assert [r.run_id for r in got] == ["r02", "r68", "r69"]
    assert [r.run_id for r in s.list_runs() if r.lease_owner == "me"] == ["r02", "r68", "r69"]
    assert len([r for r in s.list_runs() if r.lease_owner == "other"]) == 67
    s.close()


def test_a_run_created_in_a_batch_runs_its_domain_writes_with_it(sqlite_store):
    s = sqlite_store
    s.write(lambda tx: tx.execute("CREATE TABLE notes(name TEXT)"))

    def note(name: str) -> Callable[[Any], None]:
        return lambda tx: tx.execute("INSERT INTO notes(name) VALUES (?)", (name,))

    alone = [AppendRequest(_cp("r1", 0, {}), [note("one")], run=_run("r1"))]
    assert s.append_batch(alone) == [None]
    two = [
        AppendRequest(_cp(run_id, 0, {}), [note(run_id)], run=_run(run_id))
        for run_id in ("r2", "r3")
    ]
    assert s.append_batch(two) == [None, None]
    assert s.query(lambda tx: tx.fetchall("SELECT name FROM notes ORDER BY name")) == [
        ("one",),
        ("r2",),
        ("r3",),
    ]
    assert [r.run_id for r in s.list_runs()] == ["r1", "r2", "r3"]


# -- creating a run ----------------------------------------------------------------


def test_a_second_live_run_with_the_same_flow_key_is_refused_naming_flow_and_key(sqlite_store):
    s = sqlite_store
    s.create_run(replace(_run("r1"), flow_key="invoice-7"), _cp("r1", 0, {}))
    with pytest.raises(DuplicateFlowKeyError) as err:
        s.create_run(replace(_run("r2"), flow_key="invoice-7"), _cp("r2", 0, {}))
    assert str(err.value) == "a live run of 'flow' with flow key 'invoice-7' exists"
    assert [r.run_id for r in s.list_runs()] == ["r1"]


def test_a_run_id_taken_is_refused_with_what_to_do(sqlite_store):
    s = sqlite_store
    s.create_run(_run("r1"), _cp("r1", 0, {"n": 0}))
    with pytest.raises(RevisionConflictError) as err:
        s.create_run(_run("r1"), _cp("r1", 0, {"n": 1}))
    assert str(err.value) == "run r1 already exists; pick another run id"
    assert s.latest("r1").state == {"n": 0}


def test_a_row_value_no_utf_8_file_can_hold_is_refused_with_the_encoding_error(sqlite_store):
    """A lone surrogate outside the state (here in the step id) reaches the
    row checksum, whose UTF-8 encoding refuses it: a typed error that says
    why, and nothing saved."""
    s = sqlite_store
    s.create_run(_run(), _cp("r1", 0, {}))
    with pytest.raises(StateNotStorableError) as err:
        s.append(replace(_cp("r1", 1, {"n": 1}), step_id="read-\udcff"))
    assert "cannot be stored: UnicodeEncodeError: 'utf-8' codec can't encode" in str(err.value)
    assert s.get_run("r1").revision == 0


# -- open_store ---------------------------------------------------------------------


def test_open_store_takes_the_write_gate_unless_told_not_to(tmp_path):
    """Writers take turns through ``<file>-flowdesk.lock`` (made at the first
    write) by default; ``write_gate=False`` leaves the file alone."""
    db_path = tmp_path / "flowdesk.db"
    conn = open_connection(db_path, write_gate=False)
    migrations.apply(conn)
    conn.close()
    lock = tmp_path / "flowdesk.db-flowdesk.lock"
    s = open_store(db_path, write_gate=False)
    s.create_run(_run("r1"), _cp("r1", 0, {}))
    s.close()
    assert not lock.exists()
    s = open_store(db_path)
    s.create_run(_run("r2"), _cp("r2", 0, {}))
    s.close()
    assert lock.exists()


# -- claim and renew (mutated since _locked is applied after the class) -------------


def test_a_run_a_live_owner_holds_is_not_claimed_and_the_error_names_holder_and_lease_end(
    sqlite_store,
):
    s = sqlite_store
    _make(s, "r1", "flow", T0, lease_owner="host:1:a", lease_expires_at=1_767_225_600.0)
    with pytest.raises(RunLeasedError) as err:
        s.claim("r1", Lease("host:2:b", T0 + 40, issued_at=T0 + 10), now=T0 + 10)
    assert (err.value.run_id, err.value.owner, err.value.expires_at) == (
        "r1",
        "host:1:a",
        1_767_225_600.0,
    )
    assert str(err.value) == (
        "run r1 is held by a live process: it is being executed by host:1:a. Nothing was run "
        "here. Wait for it; if that machine or process is gone, the run can be resumed when "
        "its lease runs out, at 2026-01-01T00:00:00Z."
    )
    run = s.get_run("r1")
    assert (run.lease_owner, run.lease_expires_at) == ("host:1:a", 1_767_225_600.0)


def test_a_lease_held_without_an_end_is_reported_with_no_expiry(sqlite_store):
    """Not as ending at the epoch: the message would say 1970."""
    s = sqlite_store
    _make(s, "r1", "flow", T0, lease_owner="host:1:a")
    with pytest.raises(RunLeasedError) as err:
        s.claim("r1", Lease("host:2:b", T0 + 40, issued_at=T0 + 10), now=T0 + 10)
    assert (err.value.owner, err.value.expires_at) == ("host:1:a", None)
    assert "1970" not in str(err.value)


def test_a_holder_known_dead_is_taken_over_before_its_lease_ends(sqlite_store):
    """``issued_at=inf``: the claimant knows the holder exited (same host), so
    its unexpired lease does not stand in the way; a holder it did not name does."""
    s = sqlite_store
    _make(s, "r1", "flow", T0, lease_owner="host:1:dead", lease_expires_at=T0 + 1_000)
    _make(s, "r2", "flow", T0, lease_owner="host:3:alive", lease_expires_at=T0 + 1_000)
    dead = Lease("host:2:b", T0 + 40, issued_at=math.inf, takes_over="host:1:dead")
    run = s.claim("r1", dead, now=T0 + 10)
    assert (run.lease_owner, run.lease_expires_at) == ("host:2:b", T0 + 40)
    with pytest.raises(RunLeasedError):
        s.claim("r2", dead, now=T0 + 10)
    assert s.get_run("r2").lease_owner == "host:3:alive"


def test_renew_extends_only_this_owners_live_runs_and_says_which(sqlite_store):
    s = sqlite_store
    mine = {"lease_owner": "me", "lease_expires_at": T0 + 30}
    _make(s, "pending", "flow", T0, **mine)
    s.create_run(
        RunRecord("running", "flow", "v1", "running", 0, T0, T0, **mine), _cp("running", 0, {})
    )
    _make(s, "theirs", "flow", T0, lease_owner="other", lease_expires_at=T0 + 30)
    s.create_run(RunRecord("done", "flow", "v1", "running", 0, T0, T0), _cp("done", 0, {}))
    s.append(_cp("done", 1, {}, status="completed"))
    assert s.renew([], Lease("me", T0 + 90)) == set()
    got = s.renew(["pending", "running", "theirs", "done"], Lease("me", T0 + 90))
    assert got == {"pending", "running"}
    expiry = {r.run_id: (r.lease_owner, r.lease_expires_at) for r in s.list_runs()}
    assert expiry == {
        "pending": ("me", T0 + 90),
        "running": ("me", T0 + 90),
        "theirs": ("other", T0 + 30),
        "done": (None, None),
    }


def _runs(store: SqliteCheckpointStore, *specs: tuple[str, str, float, dict[str, Any]]) -> None:
    """Create runs ``(run_id, status, created_at, RunRecord fields)`` in one batch."""
    store.append_batch(
        [
            AppendRequest(
                replace(_cp(run_id, 0, {}, status=status), created_at=at),
                run=RunRecord(run_id, kw.pop("flow", "flow"), "v1", status, 0, at, at, **kw),  # type: ignore[arg-type]
            )
            for run_id, status, at, kw in specs
        ]
    )


def _leases(store: SqliteCheckpointStore) -> dict[str, tuple[str | None, float | None]]:
    return {r.run_id: (r.lease_owner, r.lease_expires_at) for r in store.list_runs()}


def test_claim_runnable_hands_out_interrupted_runs_oldest_first_then_waiting_runs_due(
    sqlite_store,
):
    s = sqlite_store
    _runs(
        s,
        ("p1", "pending", T0 + 1, {}),
        ("r0", "running", T0, {}),
        ("p2", "pending", T0 + 2, {}),
        ("due", "waiting", T0 - 5, {"deadline_at": T0 + 5}),
        ("later", "waiting", T0 - 5, {"deadline_at": T0 + 500}),
    )
    got = s.claim_runnable("me", 30.0, now=T0 + 10)
    assert [(r.run_id, r.lease_owner, r.lease_expires_at) for r in got] == [
        ("r0", "me", T0 + 40),
        ("p1", "me", T0 + 40),
        ("p2", "me", T0 + 40),
        ("due", "me", T0 + 40),
    ]
    assert _leases(s)["later"] == (None, None)
    assert {k: v for k, v in _leases(s).items() if k != "later"} == {
        k: ("me", T0 + 40) for k in ("r0", "p1", "p2", "due")
    }


def test_claim_runnable_hands_out_at_most_limit_runs_and_waiting_runs_only_when_asked(
    sqlite_store,
):
    s = sqlite_store
    _runs(
        s,
        *[(f"p{i}", "pending", T0 + i, {}) for i in range(3)],
        *[(f"w{i}", "waiting", T0 + i, {"deadline_at": T0 + 5}) for i in range(2)],
    )
    at = T0 + 10
    assert [r.run_id for r in s.claim_runnable("a", 30.0, limit=1, now=at)] == ["p0"]
    assert [r.run_id for r in s.claim_runnable("b", 30.0, limit=2, now=at)] == ["p1", "p2"]
    assert s.claim_runnable("c", 30.0, limit=0, now=at) == []
    assert s.claim_runnable("c", 30.0, wakeable=False, now=at) == []
    assert [r.run_id for r in s.claim_runnable("c", 30.0, limit=1, now=at)] == ["w0"]
    assert _leases(s)["w1"] == (None, None)


def test_claim_runnable_takes_waiting_runs_due_of_the_flows_asked_only(sqlite_store):
    s = sqlite_store
    _runs(
        s,
        ("a", "waiting", T0, {"deadline_at": T0 + 5, "flow": "alpha"}),
        ("b", "waiting", T0 + 1, {"deadline_at": T0 + 5, "flow": "beta"}),
    )
    got = s.claim_runnable("me", 30.0, flows=["beta"], now=T0 + 10)
    assert [r.run_id for r in got] == ["b"]
    assert _leases(s)["a"] == (None, None)


def _held(store: SqliteCheckpointStore) -> None:
    _runs(
        store,
        ("dead", "running", T0, {"lease_owner": "host:1:dead", "lease_expires_at": T0 + 500}),
        ("alive", "running", T0 + 1, {"lease_owner": "host:2:alive", "lease_expires_at": T0 + 5}),
        ("busy", "running", T0 + 2, {"lease_owner": "host:3:busy", "lease_expires_at": T0 + 500}),
    )


def test_claim_runnable_takes_a_run_whose_holder_is_presumed_dead_before_its_lease_ends(
    sqlite_store,
):
    s = sqlite_store
    _held(s)
    got = s.claim_runnable("me", 30.0, presumed_dead=lambda o: o == "host:1:dead", now=T0 + 10)
    assert [r.run_id for r in got] == ["dead", "alive"]  # alive's lease ran out
    assert _leases(s)["busy"] == ("host:3:busy", T0 + 500)


def test_claim_runnable_leaves_an_expired_lease_whose_holder_is_presumed_alive(sqlite_store):
    s = sqlite_store
    _held(s)
    got = s.claim_runnable("me", 30.0, presumed_alive=lambda o: o == "host:2:alive", now=T0 + 10)
    assert got == []
    assert _leases(s)["alive"] == ("host:2:alive", T0 + 5)
    got = s.claim_runnable("me", 30.0, now=T0 + 10)  # nothing said about liveness
    assert [r.run_id for r in got] == ["alive"]


def test_claim_runnable_judges_leases_by_the_stores_clock_when_no_time_is_given(db_path):
    s = open_store(db_path, clock=lambda: T0 + 10)
    _held(s)
    got = s.claim_runnable("me", 30.0)
    assert [(r.run_id, r.lease_expires_at) for r in got] == [("alive", T0 + 40)]
    s.close()


def test_claim_runnable_hands_out_a_hundred_runs_by_default(db_path):
    s = open_store(db_path, synchronous="OFF")
    _runs(s, *[(f"p{i:03}", "pending", T0 + i, {}) for i in range(101)])
    got = s.claim_runnable("me", 30.0, now=T0 + 200)
    assert [r.run_id for r in got] == [f"p{i:03}" for i in range(100)]
    assert _leases(s)["p100"] == (None, None)
    s.close()


def test_a_running_run_with_a_wait_due_does_not_stop_the_claim_of_waiting_runs(sqlite_store):
    """A run of parallel branches can be ``running`` with one branch waiting:
    the claim hands it out with the interrupted runs, and the waiting runs
    due after its wait still come (each run once)."""
    s = sqlite_store
    wait = Wait("par:b:0", "b", "timer", T0, deadline_at=T0 + 1)
    s.create_run(
        RunRecord("par", "flow", "v1", "running", 0, T0, T0),
        replace(_cp("par", 0, {}), waits=(wait,)),
    )
    _runs(s, ("w", "waiting", T0 + 1, {"deadline_at": T0 + 5}))
    got = s.claim_runnable("me", 30.0, now=T0 + 10)
    assert [r.run_id for r in got] == ["par", "w"]


# -- the outbox: claims, marks, withdrawals ------------------------------------------


def _outbox(store: SqliteCheckpointStore, *ids: str) -> None:
    """Run r1 with one intent per id, each saved with its own revision (so
    the first id is the oldest)."""
    store.create_run(_run(), _cp("r1", 0, {}))
    for n, intent_id in enumerate(ids, start=1):
        intent = Intent(intent_id, "r1", "send", "mail", {"n": n})
        store.append(_cp("r1", n, {"n": n}), intents=[intent])


def _ids(intents: list[Intent]) -> list[str]:
    return [i.intent_id for i in intents]


def test_an_intent_claimed_by_one_dispatcher_is_handed_to_no_other_until_its_claim_ends(
    sqlite_store,
):
    s = sqlite_store
    _outbox(s, "b1", "a2")
    at = T0 + 10
    assert _ids(s.claim_intents("d1", 30.0, limit=1, now=at)) == ["b1"]  # oldest first
    assert _ids(s.claim_intents("d2", 30.0, now=at)) == ["a2"]  # b1 is d1's
    assert s.claim_intents("d3", 30.0, now=at + 29) == []  # both held until at + 30
    assert _ids(s.claim_intents("d1", 30.0, now=at + 29)) == ["b1"]  # its own again
    assert _ids(s.claim_intents("d3", 30.0, now=at + 30)) == ["a2"]  # d2's claim ended
    # d1's renewed claim lasts until at + 59, d3's until at + 60
    assert s.claim_intents("d4", 30.0, now=at + 58) == []
    assert _ids(s.claim_intents("d4", 30.0, now=at + 59)) == ["b1"]


def test_an_intent_held_by_a_dispatcher_presumed_dead_is_taken_at_once(sqlite_store):
    s = sqlite_store
    _outbox(s, "i1")
    s.claim_intents("host:1:dead", 30.0, now=T0)
    assert s.claim_intents("d2", 30.0, presumed_dead=lambda o: False, now=T0 + 1) == []
    got = s.claim_intents("d2", 30.0, presumed_dead=lambda o: o == "host:1:dead", now=T0 + 1)
    assert _ids(got) == ["i1"]


def test_an_intent_whose_sending_was_cut_off_is_handed_out_as_interrupted(sqlite_store):
    s = sqlite_store
    _outbox(s, "sent", "fresh")
    s.claim_intents("d1", 30.0, limit=1, now=T0)
    assert s.mark_intent("sent", "sending", T0 + 1)
    got = s.claim_intents("d2", 30.0, now=T0 + 31)  # d1 died mid-send
    assert [(i.intent_id, i.status, i.attempts, i.interrupted) for i in got] == [
        ("sent", "sending", 1, True),
        ("fresh", "pending", 0, False),
    ]


def test_claim_intents_hands_out_a_hundred_by_default_judged_by_the_stores_clock(db_path):
    s = open_store(db_path, synchronous="OFF", clock=lambda: T0 + 10)
    s.create_run(_run(), _cp("r1", 0, {}))
    intents = [Intent(f"i{n:03}", "r1", "send", "mail", n) for n in range(101)]
    s.append(_cp("r1", 1, {}), intents=intents)
    assert _ids(s.claim_intents("d1", 30.0)) == [f"i{n:03}" for n in range(100)]
    assert _ids(s.claim_intents("d2", 30.0, now=T0 + 39)) == ["i100"]
    assert _ids(s.claim_intents("d3", 30.0)) == []  # the store's clock: T0 + 10
    s.close()


def test_mark_intent_moves_an_intent_and_says_whether_it_moved(sqlite_store):
    s = sqlite_store
    _outbox(s, "ok", "bad")
    assert s.mark_intent("ok", "delivered", T0, expect="sending") is False  # still pending
    assert s.mark_intent("ok", "sending", T0) is True
    assert s.mark_intent("ok", "sending", T0 + 1) is True  # a second attempt
    assert s.mark_intent("ok", "delivered", T0 + 2, receipt={"id": 7}, expect="sending")
    assert s.mark_intent("bad", "failed", T0 + 3, error="550 no such mailbox") is True
    assert s.mark_intent("nope", "failed", T0 + 3, error="x") is False
    got = {i.intent_id: i for i in s.intents(["pending", "sending", "delivered", "failed"])}
    assert (got["ok"].status, got["ok"].attempts, got["ok"].receipt) == ("delivered", 2, {"id": 7})
    assert (got["bad"].status, got["bad"].attempts, got["bad"].last_error) == (
        "failed",
        0,
        "550 no such mailbox",
    )


def test_withdraw_takes_back_every_intent_no_live_dispatcher_is_sending(db_path):
    s = open_store(db_path, clock=lambda: T0 + 100)
    _outbox(s, "pending", "live", "expired", "dead")
    s.claim_intents("d0", 1_000.0, limit=1, now=T0)  # "pending": claimed, never sent
    # each dispatcher takes the oldest intent left, then starts sending it
    for intent_id, owner, at, ttl in [
        ("live", "d1", T0 + 90, 30.0),  # until T0 + 120
        ("expired", "d2", T0, 30.0),  # until T0 + 30
        ("dead", "d3", T0 + 20, 100.0),  # until T0 + 120
    ]:
        assert _ids(s.claim_intents(owner, ttl, limit=1, now=at)) == [intent_id]
        s.mark_intent(intent_id, "sending", at)
    done = s.withdraw_intents("r1", "the run was cancelled", presumed_dead=lambda o: o == "d3")
    assert (_ids(done.withdrawn), _ids(done.in_flight)) == (
        ["pending", "expired", "dead"],
        ["live"],
    )
    assert [i.status for i in done.withdrawn] == ["pending", "sending", "sending"]
    got = {i.intent_id: (i.status, i.last_error) for i in s.intents(["sending", "failed"])}
    assert got == {
        "pending": ("failed", "the run was cancelled"),
        "live": ("sending", None),
        "expired": ("failed", "the run was cancelled"),
        "dead": ("failed", "the run was cancelled"),
    }
    s.close()


def test_withdraw_judges_claims_at_the_time_it_is_given(db_path):
    s = open_store(db_path, clock=lambda: T0)
    _outbox(s, "i1")
    s.claim_intents("d1", 30.0, now=T0)
    s.mark_intent("i1", "sending", T0)
    early = s.withdraw_intents("r1", "cancelled", now=T0 + 29)
    assert (_ids(early.withdrawn), _ids(early.in_flight)) == ([], ["i1"])
    late = s.withdraw_intents("r1", "cancelled", now=T0 + 30)  # the store's clock says T0
    assert (_ids(late.withdrawn), _ids(late.in_flight)) == (["i1"], [])
    s.close()


def test_every_public_method_but_the_clocks_waits_for_the_connection_lock(db_path):
    """apsw refuses two threads on one connection at once: each method that
    uses it takes the store's lock first (a method added later too); the
    clock reads (``now``, ``file_system_now``) use no connection."""
    import threading

    store = open_store(db_path)
    try:
        public = [n for n, v in vars(SqliteCheckpointStore).items()
                  if callable(v) and not n.startswith("_")]  # fmt: skip
        assert len(public) > 30
        entered = threading.Event()
        done: list[str] = []
        with store._lock:  # another thread holds the connection
            caller = threading.Thread(
                target=lambda: (entered.set(), store.list_runs(), done.append("list_runs"))
            )
            caller.start()
            entered.wait(5)
            caller.join(0.2)
            assert done == []  # it waits for the lock
        caller.join(10)
        assert done == ["list_runs"]
        # the lock's own wrapper (its code object), not any __wrapped__: under
        # mutmut every mutated method is a trampoline carrying __wrapped__
        lock_code = _locked(lambda: None).__code__
        unlocked = [
            n
            for n in public
            if getattr(getattr(SqliteCheckpointStore, n), "__code__", None) is not lock_code
        ]
        assert unlocked == ["now", "file_system_now"]
    finally:
        store.close()


# -- a batch SQLite rolls back (full disk) ---------------------------------------


def _batch(*cps: Any) -> list[AppendRequest]:
    return [AppendRequest(cp) for cp in cps]


def test_a_full_disk_in_the_middle_of_a_batch_is_a_full_disk_and_saves_none_of_it(db_path):
    """A batch larger than SQLite's page cache writes pages to the WAL before
    its COMMIT; a full disk then makes SQLite roll the whole transaction back
    (the request's savepoint with it). The caller is told the disk is full,
    as for one append, not what apsw says about the savepoint that went."""
    vfs = PowerLossVFS(full_after_bytes=0)
    vfs.free = True
    s = open_store(db_path, vfs=vfs.name)
    try:
        s.create_run(_run("r1"), _cp("r1", 0, {"n": 0}))
        other = open_store(db_path)  # r2: a run this store has not read yet
        other.create_run(_run("r2"), _cp("r2", 0, {"n": 0}))
        other.close()
        vfs.full_after_bytes, vfs.free = vfs.written, False  # the disk is full
        big = {"n": 1, "pad": "p" * 1_500_000}  # two of them: more than the 2 MB cache
        with pytest.raises(DiskFullError) as err:
            s.append_batch(_batch(_cp("r1", 1, big), _cp("r2", 1, big)))
        assert str(db_path) in str(err.value) and "is full" in str(err.value)
        assert [s.get_run(r).revision for r in ("r1", "r2")] == [0, 0]
        vfs.free = True  # the user frees space
        assert s.append_batch(_batch(_cp("r1", 1, {"n": 1}), _cp("r2", 1, {"n": 1}))) == [
            None,
            None,
        ]
        assert wal_size(db_path) == 0  # the first commit gave the WAL's space back
    finally:
        s.close()
        vfs.unregister()


def test_a_batch_lost_at_commit_is_forgotten_by_the_store_that_sent_it(db_path):
    """A full disk at the batch's COMMIT: DiskFullError, nothing saved, and
    the store does not remember the lost revisions as saved: when another
    process then saves revision 1 its way, this store's revision 2 is stored
    against that one (a delta against the lost revision 1 would read back
    without ``y``). The first batch once space is back gives the WAL's space
    back; later ones leave the WAL to SQLite."""
    vfs = PowerLossVFS(full_after_bytes=0)
    vfs.free = True
    s = open_store(db_path, vfs=vfs.name)
    other = open_store(db_path)
    try:
        for rid in ("r1", "r2"):
            s.create_run(_run(rid), _cp(rid, 0, {"n": 0}))
        other.create_run(_run("r3"), _cp("r3", 0, {"n": 0}))  # s has not read r3
        assert s.append_batch(_batch(_cp("r2", 1, {"n": 1}))) == [None]  # one request
        assert wal_size(db_path) > 0
        vfs.full_after_bytes, vfs.free = vfs.written, False
        with pytest.raises(DiskFullError) as err:  # r3's revision 5 was refused before
            s.append_batch(
                _batch(_cp("r1", 1, {"n": 1, "y": 5}), _cp("r2", 2, {"n": 2}), _cp("r3", 5, {}))
            )
        assert str(db_path) in str(err.value)
        assert [other.get_run(r).revision for r in ("r1", "r2", "r3")] == [0, 1, 0]
        other.append(_cp("r1", 1, {"n": 7}))
        vfs.free = True
        got = s.append_batch(_batch(_cp("r1", 2, {"n": 2, "y": 5}), _cp("r2", 2, {"n": 2})))
        assert got == [None, None]
        assert wal_size(db_path) == 0
        fresh = open_store(db_path)
        assert dict(fresh.get_checkpoint("r1", 2).state) == {"n": 2, "y": 5}
        assert dict(fresh.get_checkpoint("r2", 2).state) == {"n": 2}
        fresh.close()
        s.append_batch(_batch(_cp("r1", 3, {"n": 3}), _cp("r2", 3, {"n": 3})))
        assert wal_size(db_path) > 0
    finally:
        other.close()
        s.close()
        vfs.unregister()


# -- prune, delete, vacuum --------------------------------------------------------


def _revisions(store: SqliteCheckpointStore, run_id: str = "r1") -> list[int]:
    return [i.revision for i in store.history(run_id)]


def test_prune_keeps_exactly_the_newest_n_and_each_reads_back_whole(db_path):
    s = open_store(db_path)
    s.create_run(_run(), _cp("r1", 0, {"n": 0, "keep": "k"}))
    for rev in range(1, 6):  # deltas: only n changes
        s.append(_cp("r1", rev, {"n": rev, "keep": "k"}))
    with pytest.raises(ValueError) as err:
        s.prune("r1", 0)
    assert str(err.value) == "keep_last_n must be at least 1: the latest checkpoint is never pruned"
    assert s.prune("r1", 6) == 0 and _revisions(s) == [0, 1, 2, 3, 4, 5]
    assert s.prune("r1", 3) == 3 and _revisions(s) == [3, 4, 5]
    assert s.prune("r1", 3) == 0 and _revisions(s) == [3, 4, 5]  # the oldest is the 3rd
    s.close()
    s = open_store(db_path)  # read back from the file, not the store's memory
    assert [dict(s.get_checkpoint("r1", r).state) for r in (3, 4, 5)] == [
        {"n": r, "keep": "k"} for r in (3, 4, 5)
    ]
    assert s.prune("r1", 1) == 2 and _revisions(s) == [5]
    assert dict(s.latest("r1").state) == {"n": 5, "keep": "k"}
    s.close()


def _free_pages(store: SqliteCheckpointStore) -> int:
    return int(store.query(lambda tx: tx.fetchone("PRAGMA freelist_count")[0]))


def _leave_free_pages(store: SqliteCheckpointStore, pages: int) -> None:
    """Make the file hold exactly ``pages`` free pages (a domain table's
    rows deleted, then SQLite told to give back all but ``pages``)."""

    def fill(tx: Any) -> None:
        tx.execute("CREATE TABLE IF NOT EXISTS ballast(b BLOB)")
        tx.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400) "
            "INSERT INTO ballast SELECT zeroblob(4000) FROM n"
        )
        tx.execute("DELETE FROM ballast")

    store.write(fill)
    free = _free_pages(store)
    assert free > pages
    store.write(lambda tx: tx.fetchall(f"PRAGMA incremental_vacuum({free - pages})"))
    assert _free_pages(store) == pages


def test_vacuum_gives_free_pages_back_above_the_threshold_and_says_how_many(db_path):
    s = open_store(db_path)
    _leave_free_pages(s, 1)
    assert s.vacuum(min_free_pages=1) == 0 and _free_pages(s) == 1  # not above it
    assert s.vacuum() == 1 and _free_pages(s) == 0  # by default: any free page
    assert s.vacuum() == 0
    _leave_free_pages(s, 40)
    assert s.vacuum(min_free_pages=39) == 40 and _free_pages(s) == 0
    s.close()


def test_vacuum_on_a_file_made_without_incremental_vacuum_says_it_gave_nothing_back(tmp_path):
    """A file that had tables before Flowdesk's schema (auto_vacuum is only
    settable on an empty file) keeps its free pages: vacuum() reports 0."""
    path = tmp_path / "adopted.db"
    plain = apsw.Connection(str(path))
    plain.execute("CREATE TABLE theirs(x)")  # someone else's table first
    plain.close()
    conn = open_connection(path)
    assert conn.execute("PRAGMA auto_vacuum").fetchall()[0][0] == 0  # NONE
    migrations.apply(conn)
    conn.close()
    s = open_store(path)
    # ten pages of overflow: freed by the delete whatever free pages the
    # schema's migrations left or took (a 4000-byte row fit in its leaf)
    s.write(lambda tx: tx.execute("INSERT INTO theirs SELECT zeroblob(40000)"))
    s.write(lambda tx: tx.execute("DELETE FROM theirs"))
    free = _free_pages(s)
    assert free >= 9
    assert s.vacuum() == 0 and _free_pages(s) == free
    s.close()


@pytest.mark.parametrize("free, kept", [(256, 256), (257, 0)])
def test_deleting_or_pruning_gives_the_space_back_once_more_than_256_pages_are_free(
    db_path, free, kept
):
    """1 MiB of 4 KiB pages: below that, a delete leaves its pages for the
    next writes instead of shrinking the file each time."""
    s = open_store(db_path)
    for rid in ("r1", "r2"):
        s.create_run(_run(rid), _cp(rid, 0, {"n": 0}))
        s.append(_cp(rid, 1, {"n": 1}))
    _leave_free_pages(s, free)
    assert s.prune("r1", 2) == 0  # nothing to prune: the file is left as it is
    assert _free_pages(s) == free
    assert s.prune("r1", 1) == 1  # one small row: no page freed
    assert _free_pages(s) == kept
    _leave_free_pages(s, free)
    s.delete_run("r2")
    assert _free_pages(s) == kept
    s.close()


def test_a_deleted_run_is_gone_and_its_id_can_be_used_again(sqlite_store):
    s = sqlite_store
    s.create_run(_run(), _cp("r1", 0, {"old": True}))
    s.append(_cp("r1", 1, {"old": True, "n": 1}))
    s.delete_run("r1")
    with pytest.raises(CheckpointNotFoundError):
        s.get_run("r1")
    with pytest.raises(CheckpointNotFoundError):
        s.delete_run("r1")
    s.create_run(_run(), _cp("r1", 0, {"new": True}))
    s.append(_cp("r1", 1, {"new": True, "n": 1}))
    assert dict(s.latest("r1").state) == {"new": True, "n": 1}


def test_a_run_this_store_never_read_can_be_deleted(db_path):
    a, b = open_store(db_path), open_store(db_path)
    a.create_run(_run(), _cp("r1", 0, {}))
    b.delete_run("r1")
    assert a.list_runs() == []
    a.close()
    b.close()


# -- append, head, listing --------------------------------------------------------


def test_append_stores_the_step_records_and_fields_the_writer_names_as_changed(db_path):
    """``changed_steps`` names step records, ``changed_fields`` state fields:
    each hint narrows its own comparison, and what was named reads back."""
    s = open_store(db_path)
    s.create_run(_run(), _cp("r1", 0, {"n": 0, "other": 1}))
    done = StepRecord("a", "completed", attempts=1, finished_at=T0 + 1)
    s.append(
        replace(_cp("r1", 1, {"n": 1, "other": 1}), steps={"a": done}),
        changed_steps=frozenset({"a"}),
        changed_fields=frozenset({"n"}),
    )
    s.close()
    s = open_store(db_path)
    got = s.latest("r1")
    assert (dict(got.state), dict(got.steps)) == ({"n": 1, "other": 1}, {"a": done})
    s.close()


def test_head_reads_what_another_process_saved_since_this_store_last_looked(db_path):
    a, b = open_store(db_path), open_store(db_path)
    a.create_run(_run(), _cp("r1", 0, {"n": 0}))
    assert dict(a.head("r1").checkpoint.state) == {"n": 0}
    b.append(_cp("r1", 1, {"n": 1}, status="waiting"))
    head = a.head("r1")
    assert (head.run.revision, head.run.status) == (1, "waiting")
    assert (head.checkpoint.revision, dict(head.checkpoint.state)) == (1, {"n": 1})
    head = a.head("r1")  # again, from what it read
    assert (head.run.revision, head.checkpoint.revision, dict(head.checkpoint.state)) == (
        1,
        1,
        {"n": 1},
    )
    a.close()
    b.close()


def test_list_runs_with_an_offset_and_no_limit_lists_every_run_after_it(db_path):
    s = open_store(db_path, synchronous="OFF")
    ids = [f"r{n:03}" for n in range(130)]
    requests = [
        AppendRequest(_cp(rid, 0, {}), run=replace(_run(rid), created_at=T0 + n))
        for n, rid in enumerate(ids)
    ]
    assert s.append_batch(requests) == [None] * 130
    assert [r.run_id for r in s.list_runs(offset=2)] == ids[2:]
    assert [r.run_id for r in s.list_runs(offset=2, newest_first=True)] == ids[::-1][2:]
    s.close()


# -- waits ------------------------------------------------------------------------


def _waiting(rid: str, *waits: Wait, deadline_at: float | None = None) -> AppendRequest:
    run = replace(_run(rid), status="waiting", deadline_at=deadline_at)
    return AppendRequest(_cp(rid, 0, {}, status="waiting", waits=waits), run=run)


def test_wakeable_runs_puts_due_deadlines_first_by_time_then_answered_waits(sqlite_store):
    s = sqlite_store
    s.append_batch(
        [
            _waiting("timer", Wait("timer:a:0", "a", "timer", T0, deadline_at=T0 + 30)),
            _waiting("run-deadline", deadline_at=T0 + 10),
            _waiting("signal", Wait("signal:a:0", "a", "signal", T0, name="ok", key="k")),
            _waiting("event", Wait("event:a:0", "a", "event", T0, name="deployed")),
            _waiting("later", Wait("later:a:0", "a", "timer", T0, deadline_at=T0 + 100)),
        ]
    )
    s.create_run(replace(_run("busy"), deadline_at=T0 + 1), _cp("busy", 0, {}))  # running
    assert s.wakeable_runs(T0 + 50) == ["run-deadline", "timer"]
    s.send_signal("ok", "k", {}, T0 + 1)
    s.publish_event("deployed", {}, T0 + 2)
    got = s.wakeable_runs(T0 + 50)
    assert got[:2] == ["run-deadline", "timer"] and sorted(got[2:]) == ["event", "signal"]
    assert s.wakeable_runs(T0 + 50, limit=1) == ["run-deadline"]
    assert s.wakeable_runs(T0 + 100)[:3] == ["run-deadline", "timer", "later"]


def test_wakeable_runs_wakes_a_thousand_runs_by_default(db_path):
    s = open_store(db_path, synchronous="OFF")
    ids = [f"r{n:04}" for n in range(1001)]
    s.append_batch([_waiting(rid, deadline_at=T0 + n) for n, rid in enumerate(ids)])
    assert s.wakeable_runs(T0 + 2000) == ids[:1000]
    s.close()


def test_undelivered_intents_counts_what_is_pending_or_sending_per_run_of_the_scope(db_path):
    s, other = open_store(db_path), open_store(db_path, scope="team-b")
    for store, rid, n in ((s, "r1", 3), (s, "r2", 1), (s, "r3", 1), (other, "theirs", 2)):
        store.create_run(_run(rid), _cp(rid, 0, {}))
        intents = [Intent(f"{rid}:{i}", rid, "send", "mail", i) for i in range(n)]
        store.append(_cp(rid, 1, {}), intents=intents)
    s.mark_intent("r1:0", "sending", T0)
    s.mark_intent("r1:1", "delivered", T0)
    s.mark_intent("r3:0", "failed", T0, error="refused")
    assert s.undelivered_intents() == {"r1": 2, "r2": 1}
    assert other.undelivered_intents() == {"theirs": 2}
    s.close()
    other.close()


def test_a_history_page_read_from_a_damaged_file_says_to_restore_a_backup(db_path):
    s = open_store(db_path)
    s.create_run(_run(), _cp("r1", 0, {"n": 0}))
    s.append(_cp("r1", 1, {"n": 1}))
    s.close()  # the last connection: the WAL is written back into the file
    conn = open_connection(db_path)
    page_size = conn.execute("PRAGMA page_size").fetchall()[0][0]
    ((root,),) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name='checkpoints'")
    conn.close()
    with open(db_path, "r+b") as f:  # the checkpoints table's page, overwritten
        f.seek((root - 1) * page_size)
        f.write(b"\x0d" + b"\xff" * (page_size - 1))
    s = open_store(db_path)
    try:
        assert s.get_run("r1").revision == 1  # the runs table is intact
        with pytest.raises(StoreError) as err:
            s.history_page("r1", limit=10)
        assert str(err.value).startswith(f"the database ({db_path}) is corrupt: ")
        assert str(err.value).endswith(
            "Restore it from a backup; what met the damage wrote nothing."
        )
    finally:
        s.close()


def test_an_interrupt_during_a_batch_is_raised_as_it_is_and_saves_nothing(sqlite_store):
    """Ctrl-C (or any BaseException) inside a batch's transaction rolls it
    back and reaches the caller unchanged, not as a StoreError."""
    s = sqlite_store
    for rid in ("r1", "r2"):
        s.create_run(_run(rid), _cp(rid, 0, {"n": 0}))

    def interrupted(tx: Any) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        s.append_batch(
            [
                AppendRequest(_cp("r1", 1, {"n": 1})),
                AppendRequest(_cp("r2", 1, {"n": 1}), writes=[interrupted]),
            ]
        )
    assert [s.get_run(r).revision for r in ("r1", "r2")] == [0, 0]
    assert dict(s.latest("r1").state) == {"n": 0}
