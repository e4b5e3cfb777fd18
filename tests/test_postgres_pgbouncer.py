"""PostgreSQL as teams deploy it: through a transaction-mode PgBouncer.

A real PgBouncer (``pool_mode = transaction``, two server connections per
database) stands between the CLI and the server; several processes at once
make a client connection change server connection between transactions.
What must hold: every command works as directly, no startup-parameter or
prepared-statement error, and no advisory lock is left on the server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli_support import spawn
from tests.polling import until

pytestmark = pytest.mark.postgres
#: What PgBouncer and psycopg say when session state is relied upon.
POOLER_ERRORS = ("unsupported startup parameter", "prepared statement", "26000", "42P05")


def finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    """Wait for every process; (exit code, stdout + stderr) each."""
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append((p.returncode, stdout + stderr))
    return out


def assert_clean(results: list[tuple[int, str]]) -> None:
    for code, text in results:
        assert code == 0, text
        assert not any(e in text for e in POOLER_ERRORS), text


def advisory_locks(direct_url: str) -> int:
    """Advisory locks held on the real server in this URL's database."""
    import psycopg

    with psycopg.connect(direct_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND d.datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def notes(folder: Path, n: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nbody {i}\n")
    return folder


def wait_all_completed(direct_url: str, run_ids: list[str], timeout: float = 60.0) -> None:
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(direct_url)
    try:
        deadline = time.monotonic() + timeout
        while True:
            statuses = {r: store.get_run(r).status for r in run_ids}
            if set(statuses.values()) == {"completed"}:
                return
            assert time.monotonic() < deadline, statuses
            time.sleep(0.2)
    finally:
        store.close()


def start_digests(direct_url: str, tmp_path: Path, n: int) -> list[str]:
    """``n`` pending digest runs (created, not executed), saved directly."""
    from desktop_app.flow import Engine
    from desktop_app.flows import builtin_flows
    from desktop_app.flows.digest import DigestState
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(direct_url)
    try:
        engine = Engine(store, flows=builtin_flows())
        return [
            engine.start(
                "digest",
                DigestState(folder=str(notes(tmp_path / f"in{i}")), out=str(tmp_path / f"out{i}")),
            )
            for i in range(n)
        ]
    finally:
        store.close()


@pytest.mark.scenario("S85")
def test_db_apply_run_and_resume_all_through_a_transaction_mode_pgbouncer(
    pg_server, bouncer, tmp_path
):
    """`db apply` needs no setting; the commands that open the store are
    told `postgres.pooler = "transaction"`."""
    direct = pg_server.empty_database()
    via = bouncer.url(direct)
    env = {"FLOWDESK_POSTGRES__POOLER": "transaction"}
    try:
        # three appliers at once: one applies each file, the others wait and find it done
        assert_clean(finish([spawn("--db", via, "db", "apply") for _ in range(3)]))
        assert advisory_locks(direct) == 0
        status = finish([spawn("--db", via, "db", "status")])
        assert_clean(status)
        assert "pending" not in status[0][1]

        # four runs to completion at once, each process with its own pool
        runs = [
            spawn("--db", via, "run", "digest", "--folder", str(notes(tmp_path / f"f{i}", 3)),
                "--out", str(tmp_path / f"o{i}"), "--quiet", env=env)
            for i in range(4)
        ]  # fmt: skip
        assert_clean(finish(runs))
        for i in range(4):
            assert "Note 2" in (tmp_path / f"o{i}" / "digest.md").read_text()

        pending = start_digests(direct, tmp_path, 6)
        resumed = finish([spawn("--db", via, "resume", "--all", env=env)])
        assert_clean(resumed)
        wait_all_completed(direct, pending, timeout=5)
        assert advisory_locks(direct) == 0
    finally:
        pg_server.drop_database(direct)


def serve(via: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return spawn("--db", via, "agent", "--poll", "0.3", env=env)


def stop(workers: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    for w in workers:
        w.send_signal(signal.SIGTERM)
    return finish(workers)


@pytest.mark.scenario("S85")
def test_workers_through_pgbouncer_hold_liveness_on_the_direct_listen_url(
    pg_url, bouncer, tmp_path
):
    """Workers whose pool goes through the bouncer and whose liveness and
    LISTEN use ``postgres.listen_url``: runs complete, each live worker's
    lock is held by a session on the direct URL, none is left after."""
    import psycopg

    via = bouncer.url(pg_url)
    env = {"FLOWDESK_POSTGRES__POOLER": "transaction", "FLOWDESK_POSTGRES__LISTEN_URL": pg_url}
    workers = [serve(via, env) for _ in range(2)]
    try:
        run_ids = start_digests(pg_url, tmp_path, 8)
        wait_all_completed(pg_url, run_ids)

        def lock_holders() -> list[tuple[str]]:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                return conn.execute(
                    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a "
                    "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                    "AND l.database = (SELECT oid FROM pg_database "
                    "WHERE datname = current_database())"
                ).fetchall()

        # one session lock per worker, each on its own liveness connection
        # (on a loaded machine one worker may finish the runs before the
        # other has started: wait for both to hold theirs)
        until(lambda: len(lock_holders()) >= 2, "both workers' liveness locks", 60.0)
        holders = lock_holders()
        assert sorted(h[0].endswith(" liveness") for h in holders) == [True, True], holders
    finally:
        results = stop(workers)
    assert_clean(results)
    assert advisory_locks(pg_url) == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM flowdesk.workers").fetchone() == (0,)


@pytest.mark.scenario("S85")
def test_a_worker_behind_pgbouncer_without_listen_url_says_it_polls(pg_url, bouncer, tmp_path):
    """No direct URL: the worker says it holds no liveness lock and polls,
    completes its runs all the same, and leaves no lock on a pooled server
    connection (it never takes one through the pooler)."""
    via = bouncer.url(pg_url)
    worker = serve(via, {"FLOWDESK_POSTGRES__POOLER": "transaction"})
    try:
        run_ids = start_digests(pg_url, tmp_path, 3)
        wait_all_completed(pg_url, run_ids)
        assert advisory_locks(pg_url) == 0
    finally:
        ((code, text),) = stop([worker])
    assert_clean([(code, text)])
    assert "postgres.listen_url is not set" in text and "no liveness lock" in text, text


@pytest.mark.scenario("S85")
def test_copy_listings_export_and_doctor_through_pgbouncer(pg_url, bouncer, db_path, tmp_path):
    """The other commands a team runs against the shared database, through
    the bouncer: `db copy` of a laptop file, `runs`, `show`, `export`,
    `doctor`; and a store told about the pooler without a direct URL
    refuses to LISTEN with an error naming the setting."""
    from desktop_app.errors import NoSessionError
    from desktop_app.flow import Engine
    from desktop_app.flows import builtin_flows
    from desktop_app.flows.digest import DigestState
    from desktop_app.store.postgres.store import open_postgres_store
    from desktop_app.store.sqlite.store import open_store

    via = bouncer.url(pg_url)
    laptop = open_store(db_path)
    state = DigestState(folder=str(notes(tmp_path / "in")), out=str(tmp_path / "out"))
    run_id = Engine(laptop, flows=builtin_flows()).start("digest", state)
    laptop.close()
    assert_clean(finish([spawn("db", "copy", "--from", str(db_path), "--to", via)]))
    env = {"FLOWDESK_POSTGRES__POOLER": "transaction"}
    listings = [
        spawn("--db", via, "runs", "--json", env=env),
        spawn("--db", via, "show", run_id[:8], env=env),
    ]
    results = finish([*listings, spawn("--db", via, "export", "--out", str(tmp_path / "exp"))])
    assert_clean(results)
    assert run_id in results[0][1]
    assert [r["run_id"] for r in json.loads((tmp_path / "exp" / "runs.json").read_text())] == [
        run_id
    ]
    doctor = finish([spawn("--db", via, "doctor", "--json")])
    assert '"schema"' in doctor[0][1] and not any(e in doctor[0][1] for e in POOLER_ERRORS)
    store = open_postgres_store(via, pooler="transaction")
    try:
        assert store.get_run(run_id).status == "pending"
        with pytest.raises(NoSessionError, match=r"Set postgres\.listen_url"):
            store.listener()
    finally:
        store.close()
    assert advisory_locks(pg_url) == 0


def test_doctor_warns_of_a_pooler_the_setting_does_not_name(pg_url, bouncer):
    """A team tryout: `doctor --db` on the bouncer's URL said every check
    `ok`, and a worker started there without `postgres.pooler` held its
    liveness lock on a pooled server connection. Doctor compares the port
    the server listens on with the one `--db` reaches: through the bouncer
    without the setting it warns, naming both and the setting; with the
    setting, or directly, the check is `ok`."""
    from urllib.parse import urlsplit

    via = bouncer.url(pg_url)

    def pooler_check(url: str, env: dict[str, str] | None = None) -> dict[str, str]:
        # its exit status is 1 (the throwaway server runs with fsync=off)
        ((_code, out),) = finish([spawn("--db", url, "doctor", "--json", env=env)])
        doc = json.loads(out[out.index("{") :])
        (check,) = [c for c in doc["checks"] if c["check"] == "pooler"]
        return check

    warned = pooler_check(via)
    assert warned["status"] == "warn", warned
    server, reached = urlsplit(pg_url).port, urlsplit(via).port
    assert warned["detail"] == (
        f"--db reaches port {reached}, the server listens on {server}: if that is a "
        'transaction-mode pooler (PgBouncer), set postgres.pooler = "transaction" '
        "(FLOWDESK_POSTGRES__POOLER=transaction) on every machine using it; a port "
        "forward or a proxy needs nothing"
    )
    named = pooler_check(via, env={"FLOWDESK_POSTGRES__POOLER": "transaction"})
    assert named == {
        "check": "pooler",
        "status": "ok",
        "detail": 'transaction (postgres.pooler = "transaction")',
    }
    assert pooler_check(pg_url) == {
        "check": "pooler",
        "status": "ok",
        "detail": "none (the server's own port)",
    }
