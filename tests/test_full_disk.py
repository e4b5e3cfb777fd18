"""A full disk for real: a 2 MiB tmpfs, filled to the last byte. Every
command says the disk is full, what to free and the command to run (as
printed, with the user's ``--db``), and a command that executes no run says
nothing of a paused run. The ``-shm`` index hitting ENOSPC is named as a full
disk, not "disk I/O error". A ``-wal`` left large by a process that died is
given back by the next process that opens the file.

The tmpfs needs mount privileges (root, or a user namespace): without them
these tests skip, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from desktop_app.errors import DiskFullError
from desktop_app.store.connection import WAL_LIMIT_BYTES, open_connection
from tests import cli_forkserver
from tests.cli_support import flowdesk
from tests.tmpfs_support import mounted_tmpfs

APPROVAL = json.dumps(["desktop_app.examples.approval:approval"])


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted in ``tmp_path``."""
    with mounted_tmpfs(tmp_path / "disk", "2m") as mnt:
        yield mnt


def fill(disk: Path) -> Path:
    """Write a file until ENOSPC: the disk has no byte left."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def one_line_exit_1(out) -> str:
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowdesk: "), out.stderr[-2000:]
    return lines[0]


def test_db_apply_on_a_full_disk_names_itself_and_no_run(small_disk):
    db = small_disk / "flowdesk.db"
    filler = fill(small_disk)
    line = one_line_exit_1(flowdesk(db, "db", "apply"))
    assert line == (
        f"flowdesk: the disk holding the database {db} is full (no space left on the device); "
        "nothing more was written and nothing saved before is lost. Free at least 5 MiB on "
        f"that disk, then run `flowdesk --db {db} db apply`."
    )
    filler.unlink()  # the user frees space and runs the command as printed
    assert flowdesk(db, "db", "apply").returncode == 0
    assert flowdesk(db, "runs").returncode == 0


def test_enospc_on_the_shm_index_is_a_full_disk_with_the_command_to_run(small_disk):
    db = small_disk / "flowdesk.db"
    assert flowdesk(db, "db", "apply").returncode == 0  # the -shm goes with the last connection
    filler = fill(small_disk)
    where = f"the disk holding the database's index {db}-shm is full"
    line = one_line_exit_1(flowdesk(db, "runs"))
    assert where in line and "disk I/O error" not in line
    assert line.endswith(f"Free at least 5 MiB on that disk, then run `flowdesk --db {db} runs`.")
    assert "paused" not in line
    line = one_line_exit_1(flowdesk(db, "resume", "--all"))  # executes runs: they are paused
    assert where in line and "the run stopped at its last saved step, shown as interrupted" in line
    assert line.endswith(f"then run `flowdesk --db {db} resume --all`.")
    filler.unlink()
    assert flowdesk(db, "resume", "--all").returncode == 0


def _leave_a_large_wal(db: Path, mib: int) -> None:
    """A process writes ``mib`` MiB without a checkpoint (as when a full disk
    stopped them) and is killed with SIGKILL: its ``-wal`` stays behind."""
    code = (
        "import apsw, os, signal, sys\n"
        "c = apsw.Connection(sys.argv[1])\n"
        "c.execute('PRAGMA journal_mode=WAL'); c.execute('PRAGMA wal_autocheckpoint=0')\n"
        "c.execute('CREATE TABLE big(b)')\n"
        f"for _ in range({mib}):\n"
        "    with c: c.execute('INSERT INTO big VALUES (zeroblob(1048576))')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    died = cli_forkserver.run_argv([sys.executable, "-c", code, str(db)], timeout=60)
    assert died.returncode == -9
    assert os.stat(f"{db}-wal").st_size > 2 * WAL_LIMIT_BYTES


def test_a_new_process_gives_back_the_wal_a_dead_one_left(tmp_path):
    db = tmp_path / "flowdesk.db"
    _leave_a_large_wal(db, 9)
    conn = open_connection(db)
    try:
        assert os.stat(f"{db}-wal").st_size == 0  # given back at once, not at exit
        assert conn.execute("SELECT count(*) FROM big").fetchall() == [(9,)]
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def test_a_wal_another_process_is_reading_is_left_to_it_without_waiting(tmp_path):
    db = tmp_path / "flowdesk.db"
    _leave_a_large_wal(db, 9)
    size = os.stat(f"{db}-wal").st_size
    reader = cli_forkserver.popen(
        [
            sys.executable,
            "-c",
            "import apsw, sys\n"
            "c = apsw.Connection(sys.argv[1])\n"
            "c.execute('BEGIN'); c.execute('SELECT count(*) FROM big').fetchall()\n"
            "print('reading', flush=True); sys.stdin.readline()\n",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "reading\n"
        started = time.monotonic()
        conn = open_connection(db, busy_timeout_s=10.0)
        took = time.monotonic() - started
        try:
            assert took < 2.0  # no wait for the reader (the busy timeout is 10 s)
            assert os.stat(f"{db}-wal").st_size == size  # its log, still in use
            assert conn.execute("SELECT count(*) FROM big").fetchall() == [(9,)]
        finally:
            conn.close()
    finally:
        reader.communicate("\n", timeout=30)


@pytest.mark.parametrize("index_left", [True, False])
def test_an_answer_on_a_full_disk_says_it_was_not_saved_and_how_to_answer_again(
    small_disk, index_left
):
    """The answer is not saved; the message says so and names the same
    answer, which works as printed once space is free. ``index_left``: the
    file's ``-shm`` index is still beside it (a command that wrote leaves
    it); without it (the last connection closing removes it), the answer
    cannot even open the database on the full disk: it said the run
    stopped, interrupted, and printed `resume --all`."""
    from tests.cli_support import as_printed
    from tests.damaged_flows import FLOWS_ENV

    env = {"FLOWDESK_FLOWS": FLOWS_ENV}
    db = small_disk / "flowdesk.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "asker", "--input", '{"order": "A"}', env=env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    if not index_left:
        open_connection(db).close()  # the last connection closing removes the -wal and -shm
        assert not Path(f"{db}-shm").exists()
    filler = fill(small_disk)
    line = one_line_exit_1(flowdesk(db, "answer", run_id, "yes", env=env))
    again = f"flowdesk --db {db} answer {run_id} yes"
    where = f"the database {db}" if index_left else f"the database's index {db}-shm"
    assert line == (
        f"flowdesk: the disk holding {where} is full, so the answer was not saved "
        f"(run {run_id} still waits for it); nothing saved before is lost. Free at least 5 MiB "
        f"on that disk, then run `{again}`."
    )
    assert "interrupted" not in line and "resume" not in line
    if index_left:
        shown = flowdesk(db, "waiting", env=env)  # reading needs no room
        assert shown.returncode == 0 and f"{run_id}:approve:0" in shown.stdout
    filler.unlink()  # the user frees space and runs the command as printed
    done = as_printed(line[line.index("`") + 1 : line.rindex("`")], env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    assert f"run {run_id} completed" in done.stdout


def test_a_schema_half_applied_on_a_full_disk_says_the_disk_is_full(small_disk):
    """``db apply`` commits one schema file at a time: a disk that filled up
    part way leaves the rest pending. ``runs`` and ``start`` then say the
    disk is full (not only "missing schema files": ``db apply`` would stop
    again), and the ``db apply`` they print works once space is freed."""
    from desktop_app.store import migrations
    from tests.cli_support import as_printed

    db = small_disk / "flowdesk.db"
    files = migrations.schema_files()
    conn = open_connection(db)
    try:
        migrations.apply(conn, files=files[:11])
        filler = fill(small_disk)  # the disk fills up part way: the rest stop there
        with pytest.raises(DiskFullError):
            migrations.apply(conn)
    finally:
        conn.close()
    digest = json.dumps({"folder": str(small_disk), "out": str(small_disk / "out")})
    for args in (("runs",), ("start", "digest", "--input", digest)):
        line = one_line_exit_1(flowdesk(db, *args))
        assert line.startswith(
            f"flowdesk: the database is missing {len(files) - 11} of Flowdesk's {len(files)} "
            "schema files ("
        ), line
        assert f"the disk holding {db} is full (" in line
        assert line.endswith(
            f"so applying them stops there. Free at least 5 MiB on that disk, then run "
            f"`flowdesk --db {db} db apply`."
        ), line
    filler.unlink()
    # with room on the disk the same state is only "missing", naming db apply
    roomy = one_line_exit_1(flowdesk(db, "runs"))
    assert "is full" not in roomy
    assert roomy.endswith(f"run `flowdesk --db {db} db apply` to apply it.")
    applied = as_printed(line[line.index("`") + 1 : line.rindex("`")], env=dict(os.environ))
    assert applied.returncode == 0, applied.stderr
    assert flowdesk(db, "runs").returncode == 0


def test_a_full_disk_after_a_tidy_completed_says_its_moves_are_queued_not_interrupted(
    small_disk, tmp_path
):
    """A tryout: a tidy answered yes on a disk that filled up while its moves
    were delivered said "the run stopped at its last saved step, shown as
    interrupted", while ``show`` said "status completed · 1,362 moves
    queued". The run had completed; only its queued moves were left, and
    the printed ``resume RUN`` made them once there was room.

    Delivery stops at the first write the full disk fails: at most one move
    may have been made, and then it was (its file moved, its end not
    recorded). Which write fails first depends on the disk's last pages (the
    mark that a move began, or the record that it was made), so that is zero
    or one, and the files left in the folder are exactly the moves queued.
    Before, a pass went on after a failed record (a later write found room
    again) and said "2 moves may have been made": two moves made whose end
    was not recorded."""
    from desktop_app import bootstrap
    from desktop_app.config import load_settings
    from desktop_app.flows.tidy import TidyState
    from tests.cli_support import as_printed

    folder = tmp_path / "Downloads"
    folder.mkdir()
    for i in range(20):
        (folder / f"photo{i}.jpg").write_bytes(b"jpg")
    db = small_disk / "flowdesk.db"
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    try:  # answered, its moves queued and not delivered yet (the engine does not deliver)
        run_id = engine.run("tidy", TidyState(folder=str(folder))).run_id
        assert engine.resume_with(run_id, "yes").status == "completed"
    finally:
        engine.store.close()
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as con:  # the run's WAL back into the file
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    filler = fill(small_disk)
    # room to open the database (its -shm index) and deliver some moves, not all
    os.truncate(filler, filler.stat().st_size - 160 * 1024)
    line = one_line_exit_1(flowdesk(db, "resume", run_id))
    then = f"flowdesk --db {db} resume {run_id}"
    shown = flowdesk(db, "show", run_id).stdout.splitlines()[0]  # reading needs no room
    # the message counts as show does: queued, and one whose sending began
    queued = re.search(r"status completed · (\d+) moves queued \(not made yet\)", shown)
    assert queued is not None, shown
    left = int(queued.group(1))
    assert 0 < left < 20, line  # some were made before the disk filled
    maybe = re.search(r" · (\d+) moves? may have been made", shown)
    began = 0 if maybe is None else int(maybe.group(1))
    assert began in (0, 1), shown  # delivery stopped at the first failing write
    # exactly the queued moves' files are still in the folder: the one whose
    # move began was made, and no other move is left unrecorded
    assert len(list(folder.glob("*.jpg"))) == left, shown
    said = f"{left} moves are queued" + (" and 1 move may have been made" if began else "")
    assert line == (
        f"flowdesk: the disk holding the database {db} is full; the run completed and {said}, "
        f"to be made by `{then}` (nothing saved before is lost). Free at least 5 MiB on that "
        f"disk, then run `{then}`."
    ), line
    assert "interrupted" not in line
    filler.unlink()  # the user frees space and runs the command as printed
    done = as_printed(then, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert not list(folder.glob("*.jpg"))  # every file moved
    assert "queued" not in flowdesk(db, "show", run_id).stdout


def test_opening_a_store_on_a_full_disk_says_no_run_stopped(small_disk):
    """A program's ``open_store`` on a full disk (the ``-shm`` index cannot
    be made) said a run "stopped at its last saved step" and to run
    `flowdesk resume --all` (a tryout): nothing ran; it says to open again."""
    from desktop_app.store.sqlite.store import open_store

    db = small_disk / "flowdesk.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    filler = fill(small_disk)
    with pytest.raises(DiskFullError) as full:
        open_store(db)
    said = str(full.value)
    assert "stopped" not in said and "resume" not in said, said
    assert said.endswith("Free at least 5 MiB on that disk, then open it again."), said
    filler.unlink()
    open_store(db).close()


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_export_to_a_full_disk_says_so_and_writes_nothing(small_disk, tmp_path, fmt):
    """A tryout: `export` onto a full disk ended in a traceback (`OSError:
    [Errno 28]`). It says the disk holding the folder is full and that
    nothing was written, and leaves the folder as it was."""
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    out = small_disk / "exp"
    fill(small_disk)
    done = flowdesk(db, "export", "--out", str(out), "--format", fmt)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        f"flowdesk export: cannot write in {out}: the disk holding it is full (No space left "
        "on device); free space on it or give --out a folder on another disk; nothing was "
        "written (the folder is as it was)"
    )
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.postgres
@pytest.mark.scenario("S127")
def test_db_copy_from_a_file_on_a_nearly_full_disk_copies_nothing_and_says_so(small_disk, pg_url):
    """A tryout: `db copy` from a file whose disk had ~36 KiB left committed
    the copy on PostgreSQL, then could not mark the runs moved in the file:
    both databases held them live and a side effect was made from both.
    The room the marks need is checked before PostgreSQL commits: nothing
    is copied, the message says what to free, and the command it prints,
    run as printed once space is free, moves the runs."""
    from tests.cli_support import as_printed

    db = small_disk / "f.db"
    env = {"FLOWDESK_FLOWS": APPROVAL}
    assert flowdesk(db, "db", "apply").returncode == 0
    runs = [
        flowdesk(db, "start", "approval", "--input", json.dumps({"order": f"o-{i}"}), env=env)
        for i in range(3)
    ]
    run_ids = [r.stdout.split()[0] for r in runs]
    room = small_disk / "room"
    room.write_bytes(b"\0" * 36 * 1024)
    filler = fill(small_disk)
    room.unlink()  # ~36 KiB left
    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=env)
    assert copied.returncode == 1, copied.stderr
    said = re.fullmatch(
        rf"flowdesk: the disk holding the database {re.escape(str(db))} is full \(no space "
        r"left on the device\); nothing more was written and nothing saved before is lost\. "
        r"Free at least \d+ KiB on that disk, then run `(flowdesk .+)`\.\n",
        copied.stderr,
    )
    assert said is not None, copied.stderr
    there = flowdesk(pg_url, "runs", "-o", "json")
    assert json.loads(there.stdout) == [], there.stdout  # nothing copied
    here = {r["run_id"]: r["status"] for r in json.loads(flowdesk(db, "runs", "-o", "json").stdout)}
    assert here == dict.fromkeys(run_ids, "waiting")
    filler.unlink()
    again = as_printed(said.group(1), {**os.environ, **env})
    assert again.returncode == 0, again.stderr
    moved = flowdesk(db, "resume", run_ids[0], env=env)
    assert moved.returncode == 1 and "moved to" in moved.stderr, moved.stderr


def test_doctor_on_a_full_disk_names_no_run_and_prints_itself_with_the_db(small_disk):
    """A tryout: `doctor` on a full disk whose file had no -shm said "the
    run stopped at its last saved step, shown as interrupted" and printed
    `flowdesk resume --all` without --db (the default database)."""
    from tests.cli_support import as_printed

    db = small_disk / "flowdesk.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    conn = open_connection(db)  # the last connection closing removes the -wal and -shm
    conn.close()
    filler = fill(small_disk)
    out = flowdesk(db, "doctor")
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("BAD  open")]
    assert "interrupted" not in line and "resume" not in line, line
    again = re.search(r"then run `(flowdesk [^`]+)`", line)
    assert again is not None and again.group(1) == f"flowdesk --db {db} doctor", line
    filler.unlink()
    assert "BAD  open" not in as_printed(again.group(1), dict(os.environ)).stdout
