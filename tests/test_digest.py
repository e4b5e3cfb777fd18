"""The built-in digest flow: real files, durable per file, byte-identical reports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.flows.digest import (
    REPORT_NAME,
    DigestState,
    build_digest_flow,
    check_input,
    process_file,
)
from desktop_app.flows.extract import extract, summarize
from tests import cli_forkserver
from tests.digest_corpus import make_corpus

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "crash_worker.py"


def apply_schema(path: Path) -> None:
    """``flowdesk --db PATH db apply``, a process of its own (forked from
    tests/cli_forkserver.py)."""
    out = cli_forkserver.run(["--db", str(path), "db", "apply"], timeout=120)
    assert out.returncode == 0, out.stderr


def worker(
    db: Path, folder: Path, out: Path, log: Path, *extra: str, wait: bool = True
) -> subprocess.Popen[str] | subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(WORKER), str(db), str(folder), str(out), str(log), *extra]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def read_rows(db: Path) -> list[dict]:
    """Independent check with sqlite-utils (stdlib sqlite3), after the engine closed the file."""
    import sqlite_utils

    database = sqlite_utils.Database(db)
    rows = list(database.query("SELECT * FROM digest_files ORDER BY path"))
    database.close()
    return rows


def read_runs(db: Path) -> list[dict]:
    import sqlite_utils

    database = sqlite_utils.Database(db)
    rows = list(database.query("SELECT run_id, status, progress_done, progress_total FROM runs"))
    database.close()
    return rows


def test_extract_titles_and_summaries_are_deterministic():
    md = "# The Title\n\nIntro words here. Durable durable runs resume after a crash.\n"
    assert extract("a/readme.md", md)[:2] == ("markdown", "The Title")
    rst = "Heading here\n============\n\nSome text about things. More text follows here.\n"
    assert extract("x.rst", rst)[1] == "Heading here"
    py = '"""Parse the config file.\n\nMore detail about parsing."""\nimport os\n'
    kind, title, summary = extract("pkg/mod.py", py)
    assert (kind, title) == ("code", "Parse the config file.")
    assert "Parse the config file." in summary
    nodoc = "def alpha():\n    pass\n\nclass Beta:\n    pass\n"
    assert extract("m.py", nodoc)[2] == "5 lines; defines alpha, Beta."
    text = "one two three. " * 50
    assert summarize(text) == summarize(text)


def test_binary_and_unreadable_files_are_skipped_not_crashed(tmp_path):
    (tmp_path / "b.bin").write_bytes(b"\x89PNG\x00\x00\x01")
    row = process_file(tmp_path, "b.bin")
    assert (row.kind, row.skip_reason) == ("skipped", "binary")
    (tmp_path / "gone.txt").write_text("x")
    row = process_file(tmp_path, "missing.txt")
    assert row.kind == "skipped"
    locked = tmp_path / "locked.txt"
    locked.write_text("secret")
    if os.geteuid() != 0:
        locked.chmod(0)
        row = process_file(tmp_path, "locked.txt")
        assert row.kind == "skipped" and row.skip_reason.startswith("unreadable")


def test_a_directory_in_place_of_a_file_is_skipped_as_unreadable(tmp_path):
    (tmp_path / "d.txt").mkdir()
    row = process_file(tmp_path, "d.txt")
    assert row.kind == "skipped" and row.skip_reason.startswith("unreadable")


def test_missing_folder_is_an_input_error(tmp_path):
    from desktop_app.errors import InputError

    with pytest.raises(InputError, match="does not exist"):
        check_input(tmp_path / "nope", tmp_path / "out")
    out = cli_forkserver.run_argv(
        [
            sys.executable,
            "-m",
            "desktop_app.cli",
            "--db",
            str(tmp_path / "d.db"),
            "run",
            "digest",
            "--folder",
            str(tmp_path / "nope"),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "does not exist" in out.stderr and "Traceback" not in out.stderr


def test_digest_in_process_report_and_rows(sqlite_store, tmp_path):
    folder = tmp_path / "docs"
    files = make_corpus(folder, 24)
    engine = Engine(sqlite_store, flows=[build_digest_flow()])
    res = engine.run("digest", DigestState(folder=str(folder), out=str(tmp_path / "out")))
    assert res.status == "completed"
    report = (tmp_path / "out" / REPORT_NAME).read_text()
    assert report.startswith("# Digest of docs\n")
    assert "24 files: 20 summarised, 4 skipped." in report
    assert "## part0/deep0/note0.md" in report and "(binary)" in report
    run = sqlite_store.get_run(res.run_id)
    assert run.progress == (24, 24)
    steps = sqlite_store.latest(res.run_id).steps
    assert [steps[s].status for s in ("scan", "summarize", "report")] == ["completed"] * 3
    assert steps["summarize"].iteration == 24
    # create, scan, one per file, loop completion, report
    assert len(sqlite_store.history(res.run_id)) == 1 + 1 + 24 + 1 + 1
    assert len(files) == 24


@pytest.mark.scenario("S2")
@pytest.mark.scenario("S33")
@pytest.mark.slow
def test_digest_survives_sigkill_and_matches_uninterrupted_run(tmp_path):
    folder = tmp_path / "corpus"
    files = make_corpus(folder, 300)

    # the uninterrupted baseline, in its own file
    base_db, base_out = tmp_path / "base.db", tmp_path / "base-out"
    apply_schema(base_db)
    done = worker(base_db, folder, base_out, tmp_path / "base.log")
    assert done.returncode == 0, done.stderr
    baseline = (base_out / REPORT_NAME).read_bytes()

    db, out, log = tmp_path / "crash.db", tmp_path / "crash-out", tmp_path / "crash.log"
    apply_schema(db)
    kills = 0
    # 1. killed inside a step: file 90 was processed, its commit never happened
    r = worker(db, folder, out, log, "--kill-inside", "90")
    assert r.returncode == -signal.SIGKILL
    kills += 1
    assert read_runs(db)[0]["progress_done"] == 89
    # 2. killed right after the checkpoint of file 170 committed
    r = worker(db, folder, out, log, "--kill-after", "170")
    assert r.returncode == -signal.SIGKILL
    kills += 1
    assert read_runs(db)[0]["progress_done"] == 170
    # 3. killed from outside at an arbitrary moment while files are being processed
    proc = worker(db, folder, out, log, "--delay-ms", "5", wait=False)
    deadline = time.monotonic() + 60
    start_lines = len(log.read_text().splitlines())
    while len(log.read_text().splitlines()) < start_lines + 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    kills += 1
    # 4. the restarted process finishes the run
    r = worker(db, folder, out, log)
    assert r.returncode == 0, r.stderr
    assert "completed" in r.stdout

    assert (out / REPORT_NAME).read_bytes() == baseline
    rows = read_rows(db)
    assert sorted(r["path"] for r in rows) == files
    assert all(r["times_processed"] == 1 for r in rows)  # no committed file twice
    executions = Counter(log.read_text().splitlines())
    assert set(executions) == set(files)
    redone = [p for p, c in executions.items() if c > 1]
    assert len(redone) <= kills  # only a file in flight at a kill ran again
    runs = read_runs(db)
    assert len(runs) == 1 and runs[0]["status"] == "completed"
