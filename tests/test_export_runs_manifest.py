"""``flowdesk export``: the runs ``flowdesk runs`` lists, LangGraph threads
included, and one folder never holding two exports (its manifest).

The tryout: ``export`` wrote ``runs: 0 rows`` while ``runs`` listed 4
LangGraph threads; and ``export --db B --out X --table runs`` after
``export --db A --out X`` (exit 0) left B's runs.json among A's tables.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import REPO, flowdesk
from tests.line_racer import CLI_RACER, LineRacer
from tests.test_tryout_fixes import add_agent_runs

APPROVAL = {"FLOWDESK_FLOWS": '["desktop_app.examples.approval:approval"]'}
WORKER = str(Path(REPO) / "tests" / "langgraph_worker.py")


def _threads(db: Path, tmp_path: Path, *names: str) -> None:
    """LangGraph threads ``names`` in ``db``, each run by its program (a process
    of its own) to its interrupt (status ``waiting``)."""
    for name in names:
        done = subprocess.run(
            [sys.executable, WORKER, str(db), str(tmp_path / "counts"), name],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr


def _database(tmp_path: Path, name: str, threads: int = 2) -> Path:
    """A file holding a flow run, 2 agent runs and ``threads`` LangGraph threads."""
    db = tmp_path / name
    assert flowdesk(db, "db", "apply", env=APPROVAL).returncode == 0
    started = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=APPROVAL)
    assert started.returncode == 0, started.stderr
    add_agent_runs(db, 2)
    _threads(db, tmp_path, *(f"{name}-thread-{i}" for i in range(threads)))
    return db


def _listed(db: Path | str) -> dict[str, set[str]]:
    """Run ids by kind, as ``flowdesk runs -o json`` lists them."""
    shown = flowdesk(db, "runs", "-o", "json", "--limit", "1000", env=APPROVAL)
    assert shown.returncode == 0, shown.stderr
    kinds: dict[str, set[str]] = {}
    for row in json.loads(shown.stdout):
        kinds.setdefault(row["kind"], set()).add(row["run_id"])
    return kinds


def _exported(out: Path) -> dict[str, set[str]]:
    """Run ids by kind in an export folder (JSON)."""
    ids = {
        kind: {r[key] for r in json.loads((out / f"{table}.json").read_text())}
        for kind, table, key in (
            ("flow", "runs", "run_id"),
            ("agent", "agent_runs", "run_id"),
            ("langgraph", "langgraph_threads", "thread_id"),
        )
    }
    return {k: v for k, v in ids.items() if v}


def _check_export_matches_runs(db: Path | str, out: Path) -> None:
    done = flowdesk(db, "export", "--out", str(out), env=APPROVAL)
    assert done.returncode == 0, done.stderr
    listed = _listed(db)
    assert set(listed) == {"flow", "agent", "langgraph"}
    assert _exported(out) == listed
    assert "langgraph_threads: 2 rows" in done.stdout
    assert "1 flow run, 2 agent runs and 2 LangGraph threads" in done.stdout
    threads = json.loads((out / "langgraph_threads.json").read_text())
    assert {t["status"] for t in threads} == {"waiting"}
    assert all(t["created_at"].endswith("Z") for t in threads)  # times as ISO-8601 UTC
    for f in out.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


@pytest.mark.slow
def test_export_writes_the_langgraph_threads_runs_lists_on_sqlite(tmp_path: Path) -> None:
    db = _database(tmp_path, "a.db")
    _check_export_matches_runs(db, tmp_path / "out")
    # another scope's export holds none of them, as its `runs` lists none
    other = flowdesk(db, "--scope", "work", "export", "--out", str(tmp_path / "work"))
    assert other.returncode == 0, other.stderr
    assert "langgraph_threads: 0 rows" in other.stdout


@pytest.mark.slow
@pytest.mark.postgres
def test_export_writes_the_langgraph_threads_runs_lists_on_postgres(
    tmp_path: Path, pg_url: str
) -> None:
    db = _database(tmp_path, "a.db")
    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=APPROVAL)
    assert copied.returncode == 0, copied.stderr
    _check_export_matches_runs(pg_url, tmp_path / "out")


def _manifest(out: Path) -> dict:
    return json.loads((out / "flowdesk-export.json").read_text())


def test_a_folder_never_holds_two_exports(tmp_path: Path) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for db in (a, b):
        assert flowdesk(db, "db", "apply").returncode == 0
        started = flowdesk(db, "start", "approval", "--input", '{"order": "o"}', env=APPROVAL)
        assert started.returncode == 0, started.stderr
    out = tmp_path / "x"
    first = flowdesk(a, "export", "--out", str(out), "--format", "json")
    assert first.returncode == 0, first.stderr
    manifest = _manifest(out)
    assert (manifest["source"], manifest["scope"], manifest["format"]) == (
        str(a.resolve()),
        "default",
        "json",
    )
    assert "runs" in manifest["tables"] and "checkpoints" in manifest["tables"]
    assert stat.S_IMODE((out / "flowdesk-export.json").stat().st_mode) == 0o600
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    # the tryout: B's runs.json into A's export; now refused, nothing written
    mixed = flowdesk(b, "export", "--out", str(out), "--format", "json", "--table", "runs")
    assert mixed.returncode == 2, mixed.stdout + mixed.stderr
    assert mixed.stderr == (
        f"flowdesk export: {out} holds the export of {a.resolve()} (scope 'default'; its "
        f"flowdesk-export.json), not of {b.resolve()} (scope 'default'); nothing was written, "
        "so that one folder never mixes two exports: export to an empty folder, or remove "
        "that export first\n"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # another scope of the same file is another export too
    scoped = flowdesk(a, "--scope", "work", "export", "--out", str(out), "--table", "runs")
    assert scoped.returncode == 2 and "not of" in scoped.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before

    # the same source and scope: its files replaced, the manifest still lists every table
    again = flowdesk(a, "export", "--out", str(out), "--table", "runs")
    assert again.returncode == 0, again.stderr
    assert _manifest(out)["tables"] == manifest["tables"]
    assert sorted(p.name for p in out.iterdir()) == sorted(before)

    # what the refusal says to do works: an empty folder, or the old export removed
    fresh = flowdesk(b, "export", "--out", str(tmp_path / "y"), "--table", "runs")
    assert fresh.returncode == 0, fresh.stderr
    for p in out.iterdir():
        p.unlink()
    moved = flowdesk(b, "export", "--out", str(out), "--table", "runs")
    assert moved.returncode == 0, moved.stderr
    assert _manifest(out)["source"] == str(b.resolve())
    assert _manifest(out)["tables"] == ["runs"]


def test_a_folder_of_json_files_without_a_manifest_is_refused(tmp_path: Path) -> None:
    """Files no manifest vouches for (an export of an earlier version, or the
    user's own) are neither replaced nor joined."""
    db = tmp_path / "a.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    out = tmp_path / "x"
    out.mkdir()
    (out / "runs.json").write_text("[]")
    refused = flowdesk(db, "export", "--out", str(out))
    assert refused.returncode == 2
    assert f"{out} holds runs.json and no flowdesk-export.json" in refused.stderr
    assert sorted(p.name for p in out.iterdir()) == ["runs.json"]
    assert (out / "runs.json").read_text() == "[]"
    (out / "notes.txt").write_text("mine")  # other files are no export's: left alone
    (out / "runs.json").unlink()
    done = flowdesk(db, "export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "notes.txt").read_text() == "mine"


def test_two_exports_into_one_folder_at_once_never_mix(tmp_path: Path) -> None:
    """Two exports of different files into one new folder, released together,
    20 rounds: one writes, the other is refused (exit 2); the folder holds
    exactly the files of the one its manifest names. Each export is a process
    kept across rounds (tests/cli_racer.py), running what ``flowdesk export``
    runs (``desktop_app.export.main``) once per round."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for db, order in ((a, "o-a"), (b, "o-b")):
        assert flowdesk(db, "db", "apply").returncode == 0
        started = flowdesk(
            db, "start", "approval", "--input", json.dumps({"order": order}), env=APPROVAL
        )
        assert started.returncode == 0, started.stderr
    listed = {str(db.resolve()): _listed(db)["flow"] for db in (a, b)}
    wins = {str(a.resolve()): 0, str(b.resolve()): 0}
    racers = [LineRacer(CLI_RACER, env={**os.environ, "PYTHONPATH": str(REPO)}) for _ in (a, b)]
    try:
        for round_ in range(20):
            out, go = tmp_path / f"out{round_}", tmp_path / f"go{round_}"
            for db, racer in zip((a, b), racers, strict=True):
                racer.task(round_, go=str(go), do="export", args=[str(db), str(out)])
            go.touch()
            told = [racer.told(round_) for racer in racers]
            assert sorted(t["code"] for t in told) == [0, 2], told
            winner = _manifest(out)["source"]
            wins[winner] += 1
            orders = {r["run_id"] for r in json.loads((out / "runs.json").read_text())}
            assert orders == listed[winner]  # runs.json is the winner's, as every table
            tables = set(_manifest(out)["tables"])
            assert {p.name for p in out.iterdir()} == {f"{t}.json" for t in tables} | {
                "flowdesk-export.json"
            }
        for racer in racers:
            racer.close()
    finally:
        for racer in racers:
            if racer.proc.poll() is None:
                racer.proc.kill()
                racer.proc.communicate(timeout=60)
    assert sum(wins.values()) == 20, wins
    assert {str(db.resolve()): _listed(db)["flow"] for db in (a, b)} == listed  # read only


@pytest.mark.postgres
def test_one_postgres_database_reached_by_other_urls_is_one_source(
    tmp_path: Path, pg_url: str, pg_empty_url: str
) -> None:
    """``localhost`` and ``127.0.0.1`` (and the server's socket) reach one
    database: its export adds to the folder's, while another database of
    the same server is refused (the manifest compared URL text: the same
    database by ``localhost`` was refused as another source)."""
    import psycopg

    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SHOW unix_socket_directories").fetchone()
    assert row is not None and "127.0.0.1" in pg_url
    sockets = row[0].split(",")[0].strip()
    port = pg_url.rsplit(":", 1)[1].split("/")[0]
    name = pg_url.rsplit("/", 1)[1]
    out = tmp_path / "x"
    first = flowdesk(pg_url, "export", "--out", str(out), "--table", "runs")
    assert first.returncode == 0, first.stderr
    for same in (
        pg_url.replace("127.0.0.1", "localhost"),
        f"postgresql://postgres@/{name}?host={sockets}&port={port}",
    ):
        again = flowdesk(same, "export", "--out", str(out), "--table", "checkpoints")
        assert again.returncode == 0, (same, again.stderr)
    # the database as the server names it: its cluster and its name
    source_id = _manifest(out)["source_id"]
    assert source_id.startswith("system ") and source_id.endswith(f", database {name}")
    assert _manifest(out)["tables"] == ["checkpoints", "runs"]  # one export, added to
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    assert flowdesk(pg_empty_url, "db", "apply").returncode == 0
    other = flowdesk(pg_empty_url, "export", "--out", str(out), "--table", "runs")
    assert other.returncode == 2, other.stdout + other.stderr
    assert f"not of {pg_empty_url} (scope 'default')" in other.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
