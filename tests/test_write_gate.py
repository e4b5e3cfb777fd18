"""The write gate (``desktop_app/store/write_gate.py``): a ``flock`` on
``<db>-flowdesk.lock`` around every SQLite write transaction, so writers of
several processes take turns instead of polling SQLite's lock. Real files,
real processes; outcomes are counted, nothing is timed (a timeout only turns
a hang into a failure)."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import random
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import apsw
import pytest

from desktop_app.errors import StoreError
from desktop_app.store import write_gate
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store
from desktop_app.store.write_gate import LOCK_SUFFIX

WORKER = Path(__file__).resolve().parent / "write_gate_worker.py"
LIMIT_S = 120.0


def events(db: Path) -> dict[str, int]:
    store = open_store(db)
    try:
        rows = store.conn.execute("SELECT type, count(*) FROM events GROUP BY type").fetchall()
        return {str(t): int(n) for t, n in rows}
    finally:
        store.close()


def held_elsewhere(db: Path) -> bool:
    """Whether some process holds the gate's flock (tried on a descriptor of
    our own, never waiting)."""
    fd = os.open(f"{db}{LOCK_SUFFIX}", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops our lock when we got it
    return False


def held_here(db: Path) -> bool:
    """Whether the gate's flock is held, tried on another open file of this
    process (a flock belongs to an open file, so this process's own gate
    counts as another holder)."""
    return held_elsewhere(db)


def worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_process_killed_holding_the_gate_mid_transaction_never_blocks_the_next_writer(
    db_path: Path,
) -> None:
    rounds = 5
    held = 0
    for _ in range(rounds):
        holder = worker("hold", str(db_path))
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        held += held_elsewhere(db_path)  # inside its transaction, the gate is its
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=LIMIT_S) == -signal.SIGKILL
        writer = worker("write", str(db_path), "1")
        out, _ = writer.communicate(timeout=LIMIT_S)  # a hang fails here
        assert (writer.returncode, out.strip()) == (0, "done")
    assert held == rounds
    # the killed transactions rolled back; every later write landed
    assert events(db_path) == {"written": rounds}
    assert not held_elsewhere(db_path)


def test_gated_and_ungated_processes_released_together_all_write(db_path: Path) -> None:
    """Four gated processes and one that writes without the gate (an older
    Flowdesk): the ungated one waits in SQLite's busy handler as before."""
    rounds, each = 3, 40
    for _ in range(rounds):
        procs = [worker("race", str(db_path), str(each), "1") for _ in range(4)]
        procs.append(worker("race", str(db_path), str(each), "0"))
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outcomes = [(p.communicate(timeout=LIMIT_S)[0].strip(), p.returncode) for p in procs]
        assert outcomes == [("done", 0)] * len(procs)
    assert events(db_path) == {"raced": rounds * 5 * each}


def test_the_lock_file_is_made_0600_at_the_first_write_and_not_by_readers(
    db_path: Path,
) -> None:
    fresh = db_path.with_name("fresh.db")  # no process has written it yet
    fresh.write_bytes(db_path.read_bytes())  # closed: its WAL is checkpointed
    lock = Path(f"{fresh}{LOCK_SUFFIX}")
    store = open_store(fresh)
    try:
        assert store.list_runs() == [] and store.first_event("x", 0) is None
        assert not lock.exists()
        store.publish_event("x", {}, store.now())
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    finally:
        store.close()
    assert not held_elsewhere(fresh)


def test_a_file_that_took_over_another_files_inode_gets_its_own_lock_file(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The process finds its gate by the file's (device, inode); a folder of
    databases deleted and made again (a test's or a benchmark's temporary
    folder) can give a new file the inode of a file this process wrote. The
    new file must lock its own ``-flowdesk.lock``, not the gone file's (whose
    folder may be gone too: every write would then skip the gate). A rename
    reproduces it deterministically: same inode, the old path gone."""
    old = db_path.with_name("old.db")
    old.write_bytes(db_path.read_bytes())
    store = open_store(old)
    store.publish_event("x", {}, store.now())
    store.close()
    new = db_path.with_name("new.db")
    old.rename(new)
    Path(f"{old}{LOCK_SUFFIX}").unlink()
    inside: list[bool] = []
    with caplog.at_level(logging.WARNING, logger=write_gate.log.name):
        store = open_store(new)
        try:
            # inside the transaction the gate is new's own lock file's
            store.write(lambda tx: inside.append(held_elsewhere(new)))
            store.publish_event("y", {}, store.now())
        finally:
            store.close()
    assert inside == [True] and held_elsewhere(new) is False
    assert stat.S_IMODE(Path(f"{new}{LOCK_SUFFIX}").stat().st_mode) == 0o600
    assert not Path(f"{old}{LOCK_SUFFIX}").exists()
    assert "cannot lock" not in caplog.text
    assert events(new) == {"x": 1, "y": 1}


def test_threads_with_their_own_connections_share_the_gate(db_path: Path) -> None:
    """Two stores of one process on one file: their writers queue on the
    process's gate (never on each other's flock) and all writes land."""
    stores = [open_store(db_path), open_store(db_path)]
    errors: list[BaseException] = []

    def write(store: SqliteCheckpointStore) -> None:
        try:
            for i in range(50):
                store.publish_event("t", {"i": i}, store.now())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(stores[i % 2],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=LIMIT_S)
    for s in stores:
        s.close()
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert events(db_path) == {"t": 200}


def test_a_write_nested_in_another_connections_transaction_fails_typed_not_hangs(
    db_path: Path,
) -> None:
    """One thread holding a write transaction on one connection and writing
    through a second connection to the same file: as without the gate, the
    second waits for SQLite's lock up to the busy timeout and raises the
    typed error; the outer transaction still commits."""
    outer = open_store(db_path, busy_timeout_s=0.2)
    inner = open_store(db_path, busy_timeout_s=0.2)
    caught: list[BaseException] = []

    def op(tx: object) -> None:
        outer.publish_event("outer", {}, outer.now())
        try:
            inner.publish_event("inner", {}, inner.now())
        except StoreError as exc:
            caught.append(exc)

    outer.write(op)
    outer.close()
    inner.close()
    assert len(caught) == 1 and "busy timeout" in str(caught[0])
    assert events(db_path) == {"outer": 1}


def test_a_writer_outside_the_gate_holding_the_lock_gives_the_busy_error_and_frees_the_gate(
    db_path: Path,
) -> None:
    """A writer that does not take the gate (the sqlite3 shell) holds the
    write lock: the gated writer still waits only the busy timeout, fails
    typed, and gives the gate back."""
    import apsw

    raw = apsw.Connection(str(db_path))
    raw.execute("BEGIN IMMEDIATE")
    store = open_store(db_path, busy_timeout_s=0.2)
    try:
        with pytest.raises(StoreError, match="busy timeout"):
            store.publish_event("blocked", {}, store.now())
        assert not held_elsewhere(db_path)
        raw.execute("ROLLBACK")
        store.publish_event("after", {}, store.now())
    finally:
        store.close()
        raw.close()
    assert events(db_path) == {"after": 1}


def test_where_flock_is_refused_writes_go_on_without_the_gate_logged_once(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refused(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    # a file no earlier test of this process has a gate for
    fresh = db_path.with_name("nfs.db")
    fresh.write_bytes(db_path.read_bytes())  # closed: its WAL is checkpointed
    monkeypatch.setattr(write_gate.fcntl, "flock", refused)
    caplog.set_level(logging.WARNING, logger="desktop_app.store.write_gate")
    stores = [open_store(fresh), open_store(fresh)]
    for store in stores:
        for _ in range(3):
            store.publish_event("nfs", {}, store.now())
        store.close()
    warned = [r for r in caplog.records if r.name == "desktop_app.store.write_gate"]
    assert len(warned) == 1 and LOCK_SUFFIX in warned[0].getMessage()
    assert events(fresh) == {"nfs": 6}


def test_a_writer_stopped_inside_its_transaction_gives_the_locked_error_not_a_hang(
    db_path: Path,
) -> None:
    """A process suspended (Ctrl-Z, SIGSTOP) inside a write transaction holds
    the gate: another writer waits for it no longer than its busy timeout,
    then gets the typed "stayed locked" error, as without the gate; once the
    holder is gone the same store writes."""
    from desktop_app.errors import StoreError

    holder = worker("hold", str(db_path))
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "holding"
        holder.send_signal(signal.SIGSTOP)
        assert held_elsewhere(db_path)
        store = open_store(db_path, busy_timeout_s=0.5)
        try:
            with pytest.raises(StoreError, match="stayed locked"):
                store.publish_event("late", {}, store.now())
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=LIMIT_S)
            store.publish_event("late", {}, store.now())  # the gate is free again
        finally:
            store.close()
    finally:
        holder.kill()
        holder.wait(timeout=LIMIT_S)
    assert events(db_path) == {"late": 1}


def test_begin_and_commit_run_as_statements_so_other_threads_run_during_the_fsync(
    db_path: Path,
) -> None:
    """apsw's own ``with conn:`` runs ``COMMIT`` (fsync included) holding the
    GIL, so no other thread of the process could run meanwhile; the gated
    connection runs ``BEGIN``/``COMMIT`` as statements, whose step releases
    it. apsw's exec tracer tells them apart: a statement is traced with its
    cursor, apsw's context-manager SQL with the connection."""
    import apsw

    store = open_store(db_path)
    traced: list[tuple[str, str]] = []

    def trace(origin: object, sql: str, _bindings: object) -> bool:
        kind = "cursor" if isinstance(origin, apsw.Cursor) else "connection"
        traced.append((sql.split()[0].upper(), kind))
        return True

    try:
        store.conn.exec_trace = trace
        store.publish_event("e", {}, store.now())
        store.conn.exec_trace = None
    finally:
        store.close()
    ends = [t for t in traced if t[0] in ("BEGIN", "COMMIT", "ROLLBACK")]
    assert ends == [("BEGIN", "cursor"), ("COMMIT", "cursor")]
    assert events(db_path) == {"e": 1}


def test_a_failing_transaction_rolls_back_raises_its_own_error_and_frees_the_gate(
    db_path: Path,
) -> None:
    """The body's error is the one raised (also when SQLite had already
    rolled the transaction back: apsw's context manager replaced it with
    "cannot rollback - no transaction is active"); nothing of it is saved;
    a failing savepoint inside a transaction rolls back alone; the next
    transaction takes the gate again."""
    store = open_store(db_path)
    conn = store.conn
    insert = "INSERT INTO events(scope, type, payload, published_at) VALUES ('default', ?, '{}', 0)"
    try:
        with pytest.raises(ValueError, match="body"), conn:
            conn.execute(insert, ("lost",))
            raise ValueError("body")
        with pytest.raises(ValueError, match="after"), conn:
            conn.execute(insert, ("lost",))
            conn.execute("ROLLBACK")  # as an I/O error or a full disk does
            raise ValueError("after")
        # a failed transaction gives the flock back at once (a commit keeps
        # it for this process's turn: HOLD_S)
        assert not held_elsewhere(db_path)
        with conn:
            conn.execute(insert, ("kept",))
            with pytest.raises(KeyError), conn:  # a savepoint
                conn.execute(insert, ("lost",))
                raise KeyError("inner")
        assert not conn.in_transaction
    finally:
        store.close()
    assert not held_elsewhere(db_path)
    assert events(db_path) == {"kept": 1}


@pytest.mark.slow
def test_a_process_idle_after_its_writes_gives_the_gate_back_to_the_others(
    db_path: Path,
) -> None:
    """A process keeps the flock between its own write transactions for its
    turn (``HOLD_S``, 3 s in the worker so that its writes fall inside it);
    one that then stays idle, alive and open, gives it back by itself at the
    turn's end (the reaper thread), so another process's writer gets it
    (without the reaper this writer would wait its whole busy timeout and
    fail). Closing the store gives it back at once."""
    rounds = 3
    kept = 0
    for i in range(rounds):
        idle = worker("idle", str(db_path), "3", "3.0")
        assert idle.stdout is not None and idle.stdin is not None
        try:
            assert idle.stdout.readline().strip() == "written"
            kept += held_elsewhere(db_path)  # idle, inside its turn: still its
            store = open_store(db_path, busy_timeout_s=30)
            try:
                store.publish_event("other", {"i": i}, store.now())
            finally:
                store.close()
            assert not held_elsewhere(db_path)  # this process closed: given back
        finally:
            idle.stdin.write("\n")
            idle.stdin.flush()
            assert idle.wait(timeout=LIMIT_S) == 0
    assert kept == rounds
    assert events(db_path) == {"written": rounds * 3, "other": rounds}


def state(pid: int) -> str:
    """The process's state letter in ``/proc/PID/stat`` (``T``: stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def wait_state(pid: int, letters: str) -> None:
    deadline = time.monotonic() + LIMIT_S
    while state(pid) not in letters:
        assert time.monotonic() < deadline, f"pid {pid} never reached state {letters}"
        time.sleep(0.001)


def test_ctrl_z_gives_the_gate_back_so_others_write_while_the_writer_is_stopped(
    db_path: Path,
) -> None:
    """A process writing steps in turns, sent SIGTSTP (Ctrl-Z) at random
    moments: each time, once it is stopped, another process's write goes
    through (with a busy timeout far shorter than the time the writer stays
    stopped would need, and no retry); after SIGCONT the writer finishes its
    run with each step saved once."""
    rounds, steps = 25, 4000
    open_store(db_path).close()
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), "steps", str(db_path), str(steps)],
        stdout=subprocess.PIPE,
        text=True,
        process_group=0,  # a job of its own: SIGTSTP's default action stops it
    )
    assert proc.stdout is not None
    rng = random.Random(7)
    try:
        assert proc.stdout.readline().strip() == "ready"
        for r in range(rounds):
            time.sleep(rng.uniform(0, 0.02))
            assert proc.poll() is None, "the writer finished before the rounds did"
            proc.send_signal(signal.SIGTSTP)
            wait_state(proc.pid, "Tt")
            store = open_store(db_path, busy_timeout_s=3.0)
            try:
                store.publish_event("other", {"r": r}, store.now())
            finally:
                store.close()
            proc.send_signal(signal.SIGCONT)
            wait_state(proc.pid, "RSD")
        assert proc.stdout.readline().strip() == "done"
        assert proc.wait(timeout=LIMIT_S) == 0
    finally:
        proc.kill()
        proc.wait(timeout=LIMIT_S)
    store = open_store(db_path)
    try:
        rows = store.conn.execute("SELECT type, payload FROM events").fetchall()
    finally:
        store.close()
    seen = Counter((str(t), json.loads(p)["i" if t != "other" else "r"]) for t, p in rows)
    assert seen == Counter(
        [("step", i) for i in range(steps)]
        + [("step-end", i) for i in range(steps)]
        + [("other", r) for r in range(rounds)]
    )


def test_the_locked_error_names_a_stopped_holder_and_its_hint_frees_it(
    db_path: Path,
) -> None:
    """The "stayed locked" error names the process holding the gate (from
    ``/proc/locks``), says it is stopped and how to go on; the printed
    ``kill -CONT PID``, run as printed, lets it finish, and the write then
    goes through."""
    holder = worker("hold", str(db_path))
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "holding"
        holder.send_signal(signal.SIGSTOP)
        wait_state(holder.pid, "Tt")
        store = open_store(db_path, busy_timeout_s=0.5)
        try:
            with pytest.raises(StoreError, match="stayed locked") as caught:
                store.publish_event("late", {}, store.now())
            said = str(caught.value)
            assert f"held by pid {holder.pid} (" in said
            assert "write_gate_worker.py hold" in said
            assert (
                f"stopped (SIGSTOP or Ctrl-Z): resume it with `kill -CONT {holder.pid}` "
                "(or `fg` in its shell)"
            ) in said
            hint = re.search(r"`(kill -CONT \d+)`", said)
            assert hint is not None
            subprocess.run(hint.group(1), shell=True, check=True)
            wait_state(holder.pid, "RS")
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert holder.wait(timeout=LIMIT_S) == 3
            store.publish_event("late", {}, store.now())
        finally:
            store.close()
    finally:
        holder.kill()
        holder.wait(timeout=LIMIT_S)
    assert events(db_path) == {"held": 1, "late": 1}


def test_without_proc_locks_the_locked_error_is_as_before(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``/proc/locks`` cannot be read, the error names no holder."""
    from desktop_app.store.connection import translate

    real_open = open

    def no_proc(path: object, *args: object, **kwargs: object) -> object:
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    holder = worker("hold", str(db_path))
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "holding"
        monkeypatch.setattr("builtins.open", no_proc)
        said = str(translate(apsw.BusyError("database is locked"), db_path))
        monkeypatch.undo()
        assert said == (
            f"the database ({db_path}) stayed locked by another process past the busy "
            "timeout; nothing was written. Retry, or raise FLOWDESK_BUSY_TIMEOUT_S."
        )
        assert f"held by pid {holder.pid}" in str(
            translate(apsw.BusyError("database is locked"), db_path)
        )
    finally:
        holder.kill()
        holder.wait(timeout=LIMIT_S)


def test_ctrl_z_hands_the_given_back_gate_to_the_apps_stop_and_waits_for_a_transaction(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's path (Textual's driver stops the process in its own SIGTSTP
    handler): the gate kept in this process's turn is given back before that
    handler runs; a Ctrl-Z inside a write transaction runs it only once the
    transaction committed, its flock given back too."""
    monkeypatch.setattr(write_gate, "HOLD_S", 60.0)  # a turn that outlasts the test
    stops: list[bool] = []
    before = signal.getsignal(signal.SIGTSTP)
    store = open_store(db_path)
    try:
        write_gate.stop_gives_back_the_gate(lambda _s, _f: stops.append(held_here(db_path)))
        store.publish_event("first", {}, store.now())
        assert held_here(db_path)  # kept for the turn
        os.kill(os.getpid(), signal.SIGTSTP)
        assert stops == [False]

        def inside(tx: object) -> None:
            store.publish_event("inside", {}, store.now())
            os.kill(os.getpid(), signal.SIGTSTP)
            store.publish_event("after-signal", {}, store.now())
            assert stops == [False]  # not stopped inside the transaction

        store.write(inside)
        assert stops == [False, False]
    finally:
        signal.signal(signal.SIGTSTP, before)
        store.close()
    assert events(db_path) == {"first": 1, "inside": 1, "after-signal": 1}


AT_EXIT = """
import fcntl, os, sys
from desktop_app.store import write_gate
from desktop_app.store.sqlite.store import open_store
write_gate.HOLD_S = 60.0  # a turn longer than any transaction here, even under load
db = sys.argv[1]
store = open_store(db)
conn = store.conn
with conn:
    conn.execute("CREATE TABLE IF NOT EXISTS t(x)")
(gate,) = write_gate._GATES.values()
assert gate._kept and gate._reaper is not None  # a turn: the flock kept, a reaper watching
write_gate._stop_reapers()  # what the interpreter's exit runs first
assert gate._reaper is None and not gate._kept
with conn:
    conn.execute("INSERT INTO t VALUES (1)")
assert not gate._kept  # no turn any more: the flock is free after the commit
fd = os.open(db + write_gate.LOCK_SUFFIX, os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another holder gets it at once
print("ok")
"""


def test_at_exit_the_reaper_ends_and_no_flock_is_kept_between_transactions(
    db_path: Path,
) -> None:
    """A daemon reaper frozen by the interpreter's exit inside its lock would
    hold it for ever, and a lease given back later in the exit (a generator's
    ``finally``) waited its whole busy timeout (a process that stopped reading
    an agent's stream hung 30 s): at exit the reapers end first and no turn
    keeps the flock any more."""
    open_store(db_path).close()
    done = subprocess.run(
        [sys.executable, "-c", AT_EXIT, str(db_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_holder_started_from_a_long_path_is_named_by_its_files(tmp_path: Path) -> None:
    """A command line longer than the message allows keeps the names of its
    files and cuts their folders: a holder run from a deep checkout is named
    ``…/python3 …/script.py hold``, not a path cut before the script (CI's
    clone under a long path showed ``…py h…``)."""
    deep = tmp_path.joinpath(*["a-folder-with-a-long-name"] * 4)
    deep.mkdir(parents=True)
    script = deep / "holder_script.py"
    script.write_text("import sys, time\nprint('up', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen(
        [sys.executable, str(script), "hold"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        said = write_gate._said(proc.pid)
        assert f"held by pid {proc.pid} (" in said
        assert "\u2026/holder_script.py hold)" in said
        assert str(deep) not in said
    finally:
        proc.kill()
        proc.wait()


def test_a_waiter_sleeps_through_the_holders_turn_instead_of_polling_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder writes its turn's planned end in the lock file when it
    takes the ``flock``; a writer of another process (here: another open
    file of the lock, which ``flock`` treats as another holder) sleeps until
    then and tries about once, instead of every 0.05-1 ms through the turn."""
    db = tmp_path / "t.db"
    gate = write_gate.WriteGate(db)
    gate.acquire(5.0)  # its first turn: the lock file made, the turn's end written
    written = write_gate._TURN_END.unpack(os.pread(gate._fd, 8, 0))[0]  # type: ignore[arg-type]
    assert gate._taken_at + write_gate.HOLD_S == written
    gate.release(keep=False)

    other = os.open(f"{db}{LOCK_SUFFIX}", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        turn = 0.3  # a long turn, so that polling through it would show
        monkeypatch.setattr(write_gate, "HOLD_S", 0.5)
        os.pwrite(other, write_gate._TURN_END.pack(time.monotonic() + turn), 0)
        threading.Timer(turn, fcntl.flock, (other, fcntl.LOCK_UN)).start()
        polls = gate.polls
        gate.acquire(30.0)
        # polling from 0.05 ms doubling to 1 ms through the turn tried ~300
        # times; after it, a release a loaded machine makes late is polled
        # for (a CI run: 6 tries), still a few dozen at most
        assert gate.polls - polls <= 30, gate.polls - polls
        gate.release(keep=False)
    finally:
        os.close(other)


def test_a_waiter_polls_when_the_turn_end_is_unknown_or_implausible(tmp_path: Path) -> None:
    """A lock file without a turn's end (an older Flowdesk's, or emptied by
    the file-system clock's read), or one too far ahead (another machine's
    clock), is polled as before: the waiter goes on within a millisecond of
    the release."""
    db = tmp_path / "t.db"
    gate = write_gate.WriteGate(db)
    gate.acquire(5.0)
    gate.release(keep=False)
    other = os.open(f"{db}{LOCK_SUFFIX}", os.O_RDWR)
    try:
        for content in (b"", write_gate._TURN_END.pack(time.monotonic() + 3600)):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(other, 0)
            os.pwrite(other, content, 0)
            released = threading.Event()

            def release(done: threading.Event = released) -> None:
                # Set before the unlock: the waiter may take the lock and
                # look at the event before this thread runs again.
                done.set()
                fcntl.flock(other, fcntl.LOCK_UN)

            threading.Timer(0.2, release).start()
            polls = gate.polls
            gate.acquire(30.0)
            assert released.is_set()
            assert gate.polls - polls >= 10  # it polled through the 0.2 s
            gate.release(keep=False)
    finally:
        os.close(other)
