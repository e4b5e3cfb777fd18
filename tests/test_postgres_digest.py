"""The digest crash test on PostgreSQL: SIGKILLed several times, resumed,
its report byte-identical to an uninterrupted run's (on SQLite)."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from desktop_app.flows.digest import REPORT_NAME
from tests.digest_corpus import make_corpus
from tests.test_digest import apply_schema, worker

pytestmark = pytest.mark.postgres


def _rows(url: str) -> tuple[list[tuple], list[tuple]]:
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("SET search_path = flowdesk")
        files = conn.execute("SELECT path, times_processed FROM digest_files ORDER BY path")
        runs = conn.execute("SELECT status, progress_done FROM runs")
        return files.fetchall(), runs.fetchall()


@pytest.mark.slow
@pytest.mark.scenario("S2")
def test_digest_on_postgres_survives_sigkills_with_a_byte_identical_report(tmp_path, pg_url):
    folder = tmp_path / "corpus"
    files = make_corpus(folder, 120)
    base_db, base_out = tmp_path / "base.db", tmp_path / "base-out"
    apply_schema(base_db)
    done = worker(base_db, folder, base_out, tmp_path / "base.log")
    assert done.returncode == 0, done.stderr
    baseline = (base_out / REPORT_NAME).read_bytes()

    out, log = tmp_path / "pg-out", tmp_path / "pg.log"
    kills = 0
    r = worker(pg_url, folder, out, log, "--kill-inside", "30")  # type: ignore[arg-type]
    assert r.returncode == -signal.SIGKILL, r.stderr
    kills += 1
    assert _rows(pg_url)[1] == [("running", 29)]
    r = worker(pg_url, folder, out, log, "--kill-after", "70")  # type: ignore[arg-type]
    assert r.returncode == -signal.SIGKILL, r.stderr
    kills += 1
    assert _rows(pg_url)[1] == [("running", 70)]
    proc = worker(pg_url, folder, out, log, "--delay-ms", "5", wait=False)  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    start = len(log.read_text().splitlines())
    while len(log.read_text().splitlines()) < start + 15 and time.monotonic() < deadline:
        time.sleep(0.01)  # waiting for the fsync'd log to grow, then a kill at any moment
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    kills += 1
    r = worker(pg_url, folder, out, log)  # type: ignore[arg-type]
    assert r.returncode == 0, r.stderr
    assert "completed" in r.stdout

    assert (out / REPORT_NAME).read_bytes() == baseline
    rows, runs = _rows(pg_url)
    assert sorted(p for p, _ in rows) == files
    assert all(n == 1 for _, n in rows)  # no committed file twice
    executions = Counter(log.read_text().splitlines())
    assert set(executions) == set(files)
    assert len([p for p, c in executions.items() if c > 1]) <= kills
    assert runs == [("completed", 120)]
