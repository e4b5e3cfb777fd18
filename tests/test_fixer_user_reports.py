"""Defects a new user met from a clean clone, each reproduced as the user ran it:
``python -m desktop_app.cli`` in a real subprocess over real files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver, flow_worker
from tests.cli_support import default_sigint

REPO = Path(__file__).resolve().parents[1]


def flowdesk(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return cli_forkserver.run(["--db", str(db), *args], env=env, cwd=REPO, timeout=300)


def empty_config(tmp_path: Path) -> Path:
    """A settings file with no settings (``FLOWDESK_CONFIG`` must name a file)."""
    path = tmp_path / "none.toml"
    path.write_text("")
    return path


def two_steps() -> object:
    return (
        FlowBuilder("two", flow_worker.S)
        .step("a", lambda s: {"n": 1})
        .step("b", lambda s: {"n": 2})
        .chain()
        .compile()
    )


def test_a_killed_but_unreaped_owner_loses_its_lease_at_once(db_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    child.kill()  # SIGKILL; the Popen is kept and never waited: the child stays a zombie
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # until it has died, unreaped
    assert Path(f"/proc/{child.pid}").exists()  # still in the process table
    clock = ManualClock()
    store = open_store(db_path)
    flow = two_steps()
    owner = f"{socket.gethostname()}:{child.pid}:abc"
    dead = Engine(store, flows=[flow], clock=clock, owner=owner, lease_ttl_s=600)
    rid = dead.start("two", flow_worker.S())
    store.claim(rid, dead.lease(), clock.now())
    res = Engine(store, flows=[flow], clock=clock, lease_ttl_s=600).resume(rid)
    assert res.status == "completed" and res.state.n == 2
    store.close()
    child.wait()


def test_the_lease_message_gives_its_expiry_in_iso_utc(db_path):
    clock = ManualClock(1796129469.0)
    store = open_store(db_path)
    flow = two_steps()
    remote = Engine(store, flows=[flow], clock=clock, owner="otherhost:4242:abc", lease_ttl_s=60)
    rid = remote.start("two", flow_worker.S())
    store.claim(rid, remote.lease(), clock.now())
    with pytest.raises(RunLeasedError) as info:
        Engine(store, flows=[flow], clock=clock, lease_ttl_s=60).resume(rid)
    said = str(info.value)  # another machine's owner: its lease's expiry decides
    assert "when its lease runs out, at 2026-12-01T" in said and "epoch" not in said
    store.close()


@pytest.mark.parametrize(
    "args",
    [["--limit", "-1"], ["--limit", "0"], ["--limit", "x"], ["--status", "bogus"]],
)
def test_runs_refuses_a_bad_limit_or_status_as_a_usage_error(tmp_path, args):
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    got = flowdesk(db, "runs", *args)
    assert got.returncode == 2, got
    assert args[0] in got.stderr and got.stdout == ""
    assert flowdesk(db, "runs", "--status", "completed", "--limit", "1").returncode == 0


def test_no_run_id_is_printed_for_input_that_does_not_fit_the_flow(tmp_path):
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    got = flowdesk(db, "start", "tidy", "--input", "{}")
    assert got.returncode == 2 and "folder: Field required" in got.stderr
    assert got.stdout == ""  # no id of a run that does not exist
    assert flowdesk(db, "runs").stdout.strip() == "no runs"


def test_no_run_id_is_printed_when_the_database_is_read_only(tmp_path):
    db, folder, out = tmp_path / "f.db", tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    (folder / "a.txt").write_text("hello\n")
    assert flowdesk(db, "db", "apply").returncode == 0
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs CAP_LINUX_IMMUTABLE")
    try:
        got = flowdesk(db, "run", "digest", "--folder", str(folder), "--out", str(out))
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert got.returncode != 0 and "read-only" in got.stderr, got
    assert got.stdout == ""
    assert flowdesk(db, "runs").stdout.strip() == "no runs"


def test_the_built_in_flow_key_is_shared_and_matches_the_cli(tmp_path):
    """The app calls ``builtin_flow_key`` for its runs; the CLI stores the same key."""
    from desktop_app.flows import builtin_flow_key

    db, folder, out = tmp_path / "f.db", tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    (folder / "a.txt").write_text("hello\n")
    assert flowdesk(db, "db", "apply").returncode == 0
    got = flowdesk(db, "run", "digest", "--folder", str(folder), "--out", str(out), "--quiet")
    assert got.returncode == 0, got.stderr
    row = json.loads(flowdesk(db, "runs", "--json").stdout.splitlines()[0])
    given = {"folder": str(folder), "out": str(out)}
    assert row["flow_key"] == builtin_flow_key("digest", given)
    assert row["flow_key"].startswith("digest:")
    # ~ and relative spellings of one folder are one key
    assert builtin_flow_key("tidy", {"folder": str(folder)}) == builtin_flow_key(
        "tidy", {"folder": os.path.relpath(folder)}
    )
    assert builtin_flow_key("my_flow", given) is None


def outbox_count(db: Path) -> int:
    """Intents stored so far, read by this (engine-free) process over a read-only connection."""
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute("SELECT count(*) FROM outbox").fetchone()[0])
    except sqlite3.OperationalError:  # busy mid-checkpoint: not yet known
        return 0
    finally:
        conn.close()


@pytest.mark.slow
def test_resume_all_delivers_the_moves_of_a_tidy_killed_mid_way(tmp_path):
    import time

    db, dl = tmp_path / "f.db", tmp_path / "Downloads"
    dl.mkdir()
    for i in range(1500):
        (dl / f"note{i}.txt").write_text("t")
    for i in range(500):
        (dl / f"photo{i}.jpg").write_bytes(b"j")
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(dl)}))
    run_id = started.stdout.splitlines()[0]
    answer = subprocess.Popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "answer", run_id, "yes"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    while outbox_count(db) < 200:  # some moves queued, far from all 2000
        assert answer.poll() is None, "answer finished before it could be killed"
        time.sleep(0.05)  # poll interval only; the condition is the database's content
    answer.send_signal(signal.SIGKILL)
    answer.wait()
    assert answer.poll() is not None
    resumed = flowdesk(db, "resume", "--all")
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} completed" in resumed.stdout
    # killed inside the apply loop, before its own delivery: resume delivers them all
    assert "2,000 outbox intents delivered" in resumed.stdout
    files = [p for p in dl.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert len(files) == 2000  # every file still there once
    assert not [p for p in files if p.parent == dl]  # none left at the top
    names = sorted(p.name for p in files)
    assert names == sorted(
        [f"note{i}.txt" for i in range(1500)] + [f"photo{i}.jpg" for i in range(500)]
    )
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    moves = dict(conn.execute("SELECT status, count(*) FROM tidy_moves GROUP BY 1").fetchall())
    outbox = dict(conn.execute("SELECT status, count(*) FROM outbox GROUP BY 1").fetchall())
    conn.close()
    assert moves == {"moved": 2000} and outbox == {"delivered": 2000}


def test_an_unknown_flowdesk_environment_variable_is_a_usage_error(tmp_path):
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("FLOWDESK_")}
    got = flowdesk(db, "runs", env={**base, "FLOWDESK_DB_PTH": "x"})
    assert got.returncode == 2 and got.stdout == ""
    assert "FLOWDESK_DB_PTH" in got.stderr and "did you mean FLOWDESK_DB_PATH?" in got.stderr
    nested = flowdesk(db, "runs", env={**base, "FLOWDESK_MODEL__BASEURL": "x"})
    assert nested.returncode == 2 and "FLOWDESK_MODEL__BASE_URL" in nested.stderr
    fine = {
        **base,
        "FLOWDESK_TEST_PG_DSN": "postgresql://nowhere/x",
        "FLOWDESK_CONFIG": str(empty_config(tmp_path)),
        "FLOWDESK_RECOVERY__TIDY": "ask",
        "FLOWDESK_LOG_LEVEL": "WARNING",
    }
    ok = flowdesk(db, "runs", env=fine)
    assert ok.returncode == 0 and ok.stdout.strip() == "no runs", ok.stderr


def test_ctrl_c_on_a_terminal_ends_with_the_message_on_its_own_line(tmp_path):
    import pty
    import re
    import select

    from tests.digest_corpus import make_corpus

    make_corpus(tmp_path / "docs", 6000)
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update({"TERM": "xterm-256color", "COLUMNS": "120"})
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "desktop_app.cli", "--db", str(db), "run", "digest"),
            *("--folder", str(tmp_path / "docs"), "--out", str(tmp_path / "out")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
        preexec_fn=default_sigint,
    )
    os.close(slave)
    seen = b""
    interrupted = False
    while True:
        # a process that stops writing and never exits fails the test, not CI
        if not select.select([master], [], [], 120)[0]:
            proc.kill()
            raise AssertionError(f"run digest wrote nothing for 120 s:\n{seen.decode()[-2000:]}")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not data:
            break
        seen += data
        if not interrupted and b"ETA" in seen:  # the progress line is drawing
            proc.send_signal(signal.SIGINT)
            interrupted = True
    os.close(master)
    assert proc.wait(timeout=120) == 130
    term = seen.decode(errors="replace")
    message = "to continue"
    assert "flowdesk: interrupted" in term
    after = term[term.rindex(message) + len(message) :]
    after = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", after).lstrip("`")
    assert after in ("\r\n", "\n"), repr(after)  # nothing drawn after it; the prompt starts clean


def test_waiting_shows_the_time_left_and_the_iso_deadline(tmp_path):
    import re

    db, dl = tmp_path / "f.db", tmp_path / "Downloads"
    dl.mkdir()
    (dl / "photo.jpg").write_bytes(b"j")
    assert flowdesk(db, "db", "apply").returncode == 0
    assert flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(dl)})).returncode == 0
    text = flowdesk(db, "waiting").stdout
    assert re.search(r"deadline in 23h 5\dm \(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\)", text), text


def test_digest_lists_hidden_and_binary_files_as_skipped_and_escapes_odd_names(tmp_path):
    db, folder, out = tmp_path / "f.db", tmp_path / "in", tmp_path / "out"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\xa7\r\r\n\x00\x00\x00\x00")
    (folder / ".secret.txt").write_text("hush\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: x\n")
    (folder / "two\nlines.txt").write_text("hello\n")
    (folder / "plain.txt").write_text("plain words here\n")
    (folder / "link.txt").symlink_to(folder / "plain.txt")
    assert flowdesk(db, "db", "apply").returncode == 0
    got = flowdesk(db, "run", "digest", "--folder", str(folder), "--out", str(out), "--quiet")
    assert got.returncode == 0, got.stderr
    report = (out / "digest.md").read_text()
    assert "- __pycache__/mod.cpython-311.pyc (binary)" in report
    assert "- .secret.txt (hidden)" in report
    assert "- .git/ (hidden folder, not read)" in report
    # escaped: one list item, not a line break inside it
    assert "\n- two\\nlines.txt (the name 'two\\nlines.txt' contains a control" in report
    assert "\nlines.txt" not in report
    assert "- link.txt (a symbolic link, not followed)" in report
    assert "((" not in report and "))" not in report
    assert "6 files: 1 summarised, 5 skipped." in report
