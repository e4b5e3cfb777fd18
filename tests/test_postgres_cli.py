"""`flowdesk --db postgresql://… <command>`: the CLI on PostgreSQL, end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests import cli_forkserver
from tests.cli_support import stop_agent

pytestmark = pytest.mark.postgres
REPO = Path(__file__).resolve().parents[1]


def flowdesk(*args: str):
    return cli_forkserver.run(list(args), cwd=REPO, timeout=120)


def test_db_apply_status_run_show_export_doctor_on_postgres(pg_server, tmp_path):
    url = pg_server.empty_database()
    try:
        missing = flowdesk("--db", url, "runs")
        assert missing.returncode != 0 and "db apply" in missing.stderr  # verify, never apply
        applied = flowdesk("--db", url, "db", "apply")
        assert applied.returncode == 0, applied.stderr
        assert "applied core/0001_runs_checkpoints.sql" in applied.stdout
        assert flowdesk("--db", url, "db", "apply").stdout.startswith("schema is up to date")
        status = flowdesk("--db", url, "db", "status", "--json")
        states = [json.loads(line)["state"] for line in status.stdout.splitlines()]
        assert states and set(states) == {"applied"}

        folder = tmp_path / "notes"
        folder.mkdir()
        (folder / "a.md").write_text("# Alpha\n\nfirst note\n")
        (folder / "b.md").write_text("# Beta\n\nsecond note\n")
        out = tmp_path / "out"
        ran = flowdesk("--db", url, "run", "digest", "--folder", str(folder), "--out", str(out),
                       "--quiet")  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert "Alpha" in (out / "digest.md").read_text()
        runs = [json.loads(x) for x in flowdesk("--db", url, "runs", "--json").stdout.splitlines()]
        assert [(r["flow"], r["status"]) for r in runs if r.get("kind") == "flow"] == [
            ("digest", "completed")
        ]
        shown = flowdesk("--db", url, "show", runs[0]["run_id"][:8])
        assert shown.returncode == 0, shown.stderr

        exported = flowdesk("--db", url, "export", "--out", str(tmp_path / "exp"),
                            "--table", "digest_files")  # fmt: skip
        assert exported.returncode == 0, exported.stderr
        rows = json.loads((tmp_path / "exp" / "digest_files.json").read_text())
        assert sorted(r["path"] for r in rows) == ["a.md", "b.md"]

        doctor = flowdesk("--db", url, "doctor", "--json")
        report = json.loads(doctor.stdout)
        checks = {c["check"]: c["status"] for c in report["checks"]}
        assert checks["schema"] == "ok" and checks["server"] == "ok"
        assert checks["fsync"] == "bad"  # the throwaway test cluster runs with fsync=off
        assert doctor.returncode == 1
        password = urlsplit(url).password  # never printed (the doctor's own words
        assert password is None or password not in doctor.stdout  # may say "secrets")
        assert "password=" not in doctor.stdout
    finally:
        pg_server.drop_database(url)


def test_db_copy_then_agent_worker_finishes_the_copied_runs(db_path, pg_url, tmp_path):
    from desktop_app.flow import Engine
    from desktop_app.flows import builtin_flows
    from desktop_app.flows.digest import DigestState
    from desktop_app.store.sqlite.store import open_store

    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(3):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nbody {i}\n")
    laptop = open_store(db_path)
    pending = Engine(laptop, flows=builtin_flows()).start(
        "digest", DigestState(folder=str(folder), out=str(tmp_path / "out"))
    )
    laptop.close()

    bad = flowdesk("db", "copy", "--from", str(db_path), "--to", str(tmp_path / "x.db"))
    assert bad.returncode == 2 and "postgresql://" in bad.stderr
    copied = flowdesk("db", "copy", "--from", str(db_path), "--to", pg_url)
    assert copied.returncode == 0, copied.stderr
    assert "copied 1 flow run from" in copied.stdout

    agent = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", pg_url, "agent", "--poll", "0.2"],
        stderr=subprocess.PIPE, text=True, cwd=REPO, env=dict(os.environ),
    )  # fmt: skip
    try:
        assert agent.stderr is not None
        first = agent.stderr.readline()
        assert "worker" in first, first
        line = agent.stderr.readline()  # the run's final checkpoint committed
        assert f"run {pending} completed" in line, line
    finally:
        stop_agent(agent)
    assert agent.returncode == 0
    assert "Note 2" in (tmp_path / "out" / "digest.md").read_text()


def test_tidy_outcomes_undo_and_export_by_scope_on_postgres(pg_server, tmp_path):
    """The tidy fixes on PostgreSQL: per-file outcomes, a vanished file
    that is nothing to undo, `moved_back_at` (timestamptz) read back as the
    undo's time, and `export --scope` filtering with COPY."""
    url = pg_server.empty_database()
    try:
        assert flowdesk("--db", url, "db", "apply").returncode == 0
        ids = {}
        for scope in ("default", "work"):
            dl = tmp_path / scope
            dl.mkdir()
            for name in ("photo.jpg", "gone.png"):
                (dl / name).write_bytes(name.encode())
            started = flowdesk("--db", url, "--scope", scope, "run", "tidy", "--folder", str(dl))
            assert started.returncode == 0, started.stderr
            ids[scope] = started.stdout.splitlines()[0]
            (dl / "gone.png").unlink()
            answered = flowdesk("--db", url, "--scope", scope, "answer", ids[scope], "yes")
            assert answered.returncode == 0, answered.stderr
            assert "2 files: 1 moved, 1 left (vanished before its move)" in answered.stdout
        undone = flowdesk("--db", url, "--scope", "work", "undo", ids["work"])
        assert undone.returncode == 0, undone.stdout + undone.stderr
        assert "1 moved back, 1 never moved (nothing to undo)" in undone.stdout
        shown = json.loads(
            flowdesk("--db", url, "--scope", "work", "show", ids["work"], "-o", "json").stdout
        )
        assert shown["undone_at"] is not None and shown["undone_at"].endswith("Z")
        assert {f["name"]: f["outcome"] for f in shown["files"]} == {
            "gone.png": "vanished",
            "photo.jpg": "back",
        }
        exported = flowdesk("--db", url, "--scope", "work", "export", "--out", str(tmp_path / "x"))
        assert exported.returncode == 0, exported.stderr
        for table in ("runs", "checkpoints", "outbox", "tidy_moves"):
            rows = json.loads((tmp_path / "x" / f"{table}.json").read_text())
            assert rows and {r["run_id"] for r in rows} == {ids["work"]}, table
        moves = json.loads((tmp_path / "x" / "tidy_moves.json").read_text())
        assert sorted(m["moved_back_at"] is not None for m in moves) == [False, True]
    finally:
        pg_server.drop_database(url)


@pytest.mark.slow
def test_agent_stops_on_sigterm_soon_when_its_database_went_away(pg_url):
    """SIGTERM to a PostgreSQL ``flowdesk agent`` whose server is gone (the
    relay to it refuses and cuts every connection): it exits, saying what
    it could not write, instead of waiting the pool's 30 s for each of the
    pass's statements and retries (89 s measured before), nor the rest of
    a wait for a connection that began before the signal (up to 30 s, the
    pool's): that wait asks again every ``postgres.reconnect_max_s`` and
    ends at the next ask once the stop shortened it."""
    import time

    from tests.pg_wire import WireCounter

    relay = WireCounter(int(urlsplit(pg_url).port or 5432))
    relay.start()
    try:
        agent = cli_forkserver.popen(
            [sys.executable, "-m", "desktop_app.cli", "--db", relay.url(pg_url), "agent",
             "--poll", "0.2"],
            stderr=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        assert agent.stderr is not None
        assert agent.stderr.readline().startswith("flowdesk agent: worker ")
        time.sleep(1.0)  # a few passes with the database there (not a timing assertion)
        relay.refusing = True
        relay.cut_all()
        time.sleep(0.5)
        started = time.monotonic()
        agent.send_signal(signal.SIGTERM)
        try:
            _, err = agent.communicate(timeout=60)
        finally:
            if agent.poll() is None:
                agent.kill()
        took = time.monotonic() - started
    finally:
        relay.close()
    assert took < 30  # it took 89 s; then up to 30 s (a wait begun before the signal)
    assert "stopping after the steps in flight" in err
    assert "Traceback" not in err
