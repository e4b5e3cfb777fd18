"""Ctrl-Z and the write gate, and the holder a locked error names (kill
tests for mutants of ``_on_sigtstp``, ``describe_holder`` and ``_said`` in
``store/write_gate.py``), in this process or a child forked from it, so a
planted bug in the module this test imported is the one that runs.

Ctrl-Z (``SIGTSTP``) gives back this process's gates before it stops, so
other processes' writers go on meanwhile; with a transaction open in
another thread, the process stops once that transaction ends. The holder of
a gate is read from ``/proc/locks`` and named by its command line, cut to
80 characters. Real SQLite files and real processes; a timeout only turns
a hang into a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from desktop_app.store import write_gate
from desktop_app.store.sqlite.store import open_store
from desktop_app.store.write_gate import LOCK_SUFFIX
from tests.test_write_gate import held_elsewhere

LIMIT_S = 60.0


@pytest.fixture
def stop_handler(monkeypatch: pytest.MonkeyPatch):
    """The SIGTSTP handler and the module's stop, as they were, after the test."""
    before = signal.getsignal(signal.SIGTSTP)
    monkeypatch.setattr(write_gate, "HOLD_S", 60.0)  # a turn that outlasts the test
    monkeypatch.setattr(write_gate, "_STOP", None)
    monkeypatch.setattr(write_gate, "_STOP_PENDING", False)
    yield
    signal.signal(signal.SIGTSTP, before)


# -- Ctrl-Z -----------------------------------------------------------------


def test_the_apps_stop_gets_the_signal_and_frame_and_a_later_write_stops_nothing(
    db_path: Path, stop_handler: None
) -> None:
    stops: list[tuple[object, bool, bool]] = []
    store = open_store(db_path)
    try:
        write_gate.stop_gives_back_the_gate(
            lambda signum, frame: stops.append((signum, frame is not None, held_elsewhere(db_path)))
        )
        store.publish_event("first", {}, store.now())
        assert held_elsewhere(db_path)  # kept for the turn
        os.kill(os.getpid(), signal.SIGTSTP)
        assert stops == [(signal.SIGTSTP, True, False)]  # given back before the stop
        store.publish_event("second", {}, store.now())  # no Ctrl-Z left pending
        assert stops == [(signal.SIGTSTP, True, False)]
    finally:
        store.close()


def test_ctrl_z_while_another_thread_writes_stops_once_that_transaction_ends(
    db_path: Path, stop_handler: None
) -> None:
    """The handler does not wait for the other thread's transaction (it
    tries the gate's lock for 10 ms): it returns at once, and the process
    stops when that transaction commits, with the gate given back."""
    stops: list[bool] = []
    store = open_store(db_path)
    inside, finish = threading.Event(), threading.Event()
    write_gate.stop_gives_back_the_gate(lambda _s, _f: stops.append(held_elsewhere(db_path)))

    def long_write(tx: object) -> None:
        store.publish_event("long", {}, store.now())
        inside.set()
        assert finish.wait(LIMIT_S)

    writer = threading.Thread(target=store.write, args=(long_write,))
    writer.start()
    try:
        assert inside.wait(LIMIT_S)
        began = time.monotonic()
        os.kill(os.getpid(), signal.SIGTSTP)
        took = time.monotonic() - began
        assert stops == []  # not stopped inside the other thread's transaction
        assert took < 0.5, took  # nor kept waiting for it (the handler's 10 ms try)
    finally:
        finish.set()
        writer.join(LIMIT_S)
    deadline = time.monotonic() + LIMIT_S
    while not stops and time.monotonic() < deadline:  # the signal its commit sent
        time.sleep(0.01)
    assert stops == [False]
    store.close()


def test_without_the_apps_stop_ctrl_z_stops_the_process_gate_free_and_it_goes_on(
    db_path: Path, stop_handler: None
) -> None:
    """The command line's path: the default action stops the process (a
    child forked from this one, with this module as imported), the gate
    given back while it is stopped; after SIGCONT the handler is installed
    again and a second Ctrl-Z stops it again."""
    open_store(db_path).close()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            # a job of its own: in an orphaned process group (a runner's
            # session), the kernel discards SIGTSTP's default stop
            os.setpgid(0, 0)
            os.close(ready_r)
            write_gate.stop_gives_back_the_gate()
            store = open_store(db_path)
            store.publish_event("before", {}, store.now())
            os.write(ready_w, b"r")
            os.kill(os.getpid(), signal.SIGTSTP)  # stops here until SIGCONT
            reinstalled = signal.getsignal(signal.SIGTSTP) is write_gate._on_sigtstp
            store.publish_event("between", {}, store.now())
            os.kill(os.getpid(), signal.SIGTSTP)
            store.publish_event("after", {}, store.now())
            store.close()
            code = 0 if reinstalled else 3
        finally:
            os._exit(code)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"r"
        for _ in range(2):
            _stopped(pid)
            assert not held_elsewhere(db_path)  # given back while it is stopped
            os.kill(pid, signal.SIGCONT)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(ready_r)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    store = open_store(db_path)
    try:
        rows = store.conn.execute("SELECT type FROM events ORDER BY rowid").fetchall()
    finally:
        store.close()
    assert [r[0] for r in rows] == ["before", "between", "after"]


def test_without_the_apps_stop_the_handler_stops_by_the_default_action_and_comes_back(
    db_path: Path, stop_handler: None
) -> None:
    """The same path in this process (the forked child above is where the
    stop is real; a planted bug there is seen only by the child): the
    handler gives the gate back, sends this process SIGTSTP with the
    default action in place (``os.kill`` recorded here instead of stopping
    the test), and puts itself back once the process goes on."""
    sent: list[tuple[int, int, object, bool]] = []

    def kill(pid: int, signum: int) -> None:
        sent.append((pid, signum, signal.getsignal(signal.SIGTSTP), held_elsewhere(db_path)))

    store = open_store(db_path)
    try:
        write_gate.stop_gives_back_the_gate()
        store.publish_event("kept", {}, store.now())
        assert held_elsewhere(db_path)  # kept for the turn
        real_kill = os.kill
        os.kill = kill  # write_gate's os is this os
        try:
            write_gate._on_sigtstp(signal.SIGTSTP, None)
        finally:
            os.kill = real_kill
        assert sent == [(os.getpid(), signal.SIGTSTP, signal.SIG_DFL, False)]
        assert signal.getsignal(signal.SIGTSTP) is write_gate._on_sigtstp
        assert write_gate._STOP_PENDING is False
    finally:
        store.close()


def _stopped(pid: int) -> None:
    """Until the child is stopped (``waitpid`` with ``WUNTRACED``); fails if it
    exits or does not stop within the limit."""
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WUNTRACED | os.WNOHANG)
        if got:
            assert os.WIFSTOPPED(status), f"the child ended: {status}"
            return
        time.sleep(0.01)
    raise AssertionError("the child never stopped")


# -- the holder a locked error names ------------------------------------------


CODE = "import time;time.sleep(60)"


def _up(proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """``proc`` once ``/proc/PID/cmdline`` holds its whole command line (right
    after ``Popen`` returns it may still read empty)."""
    want = b"\0".join(os.fsencode(a) for a in proc.args) + b"\0"  # type: ignore[union-attr]
    deadline = time.monotonic() + LIMIT_S
    while Path(f"/proc/{proc.pid}/cmdline").read_bytes() != want:
        assert time.monotonic() < deadline, "the process never showed its command line"
        time.sleep(0.005)
    return proc


def _process(*argv: str | bytes) -> subprocess.Popen[bytes]:
    """A process that sleeps a minute, its command line readable."""
    return _up(subprocess.Popen([sys.executable, "-c", CODE, *argv]))


def _end(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


def test_a_running_holder_is_named_by_its_whole_command_line_up_to_80_characters() -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    for length in (79, 80, 81):  # "/usr/bin/sleep 60 000…" this long
        zeros = "0" * (length - len(f"{sleep} 60 "))
        proc = _up(subprocess.Popen([sleep, "60", zeros]))
        try:
            said = write_gate._said(proc.pid)
        finally:
            _end(proc)
        if length <= 80:  # as it is, not stopped: nothing more
            assert said == f"held by pid {proc.pid} ({sleep} 60 {zeros})"
        else:  # over 80: its absolute path cut to the file's name
            assert said == f"held by pid {proc.pid} (\u2026/sleep 60 {zeros})"


def test_a_command_line_over_80_characters_keeps_file_names_and_is_cut_to_80() -> None:
    proc = _process("dir/file.txt", "q" * 20)  # a relative path and the code as they are
    try:
        exe = "\u2026/" + sys.executable.rsplit("/", 1)[1]
        assert write_gate._said(proc.pid) == (
            f"held by pid {proc.pid} ({exe} -c {CODE} dir/file.txt {'q' * 20})"
        )
    finally:
        _end(proc)
    proc = _process("x" * 200)  # still too long: cut to 79 characters and an ellipsis
    try:
        said = write_gate._said(proc.pid)
    finally:
        _end(proc)
    prefix = f"held by pid {proc.pid} ("
    assert said.startswith(prefix) and said.endswith(")")
    inner = said[len(prefix) : -1]
    assert len(inner) == 80 and inner.startswith("\u2026/") and inner.endswith("xx\u2026")


def test_a_command_line_81_characters_long_once_shortened_is_cut_to_80() -> None:
    exe = "\u2026/" + sys.executable.rsplit("/", 1)[1]
    base = len(f"{exe} -c {CODE} ")
    proc = _process("y" * (81 - base))  # its absolute path alone keeps it over 80 at first
    try:
        said = write_gate._said(proc.pid)
    finally:
        _end(proc)
    inner = said[len(f"held by pid {proc.pid} (") : -1]
    assert inner == f"{exe} -c {CODE} {'y' * (81 - base)}"[:79] + "\u2026"


def test_a_command_line_that_is_not_utf8_is_named_with_replacement_characters() -> None:
    proc = _process(b"caf\xe9")
    try:
        assert write_gate._said(proc.pid).endswith(" caf\ufffd)")
    finally:
        _end(proc)


def test_a_holder_whose_command_line_cannot_be_read_is_named_by_its_pid_alone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # gone: /proc/PID/cmdline cannot be opened
    assert write_gate._said(proc.pid) == f"held by pid {proc.pid}"


def test_the_gates_flock_holder_is_found_among_other_locks_and_no_one_else_is(
    tmp_path: Path,
) -> None:
    """``/proc/locks`` lists every lock of the machine: the holder named is
    the one with a ``flock`` on this very lock file, past other files'
    flocks and POSIX locks listed before and after it; a POSIX lock on the
    lock file itself is not the gate's holder."""
    lock = tmp_path / f"f.db{LOCK_SUFFIX}"
    lock.touch()
    others = [tmp_path / f"other{i}" for i in range(4)]
    for o in others:
        o.touch()
    script = (
        "import fcntl, os, sys, time\n"
        "kind, path = sys.argv[1], sys.argv[2]\n"
        "fd = os.open(path, os.O_RDWR)\n"
        "(fcntl.flock if kind == 'flock' else fcntl.lockf)(fd, fcntl.LOCK_EX)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    procs: list[subprocess.Popen[bytes]] = []

    def hold(kind: str, path: Path) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, kind, str(path)], stdout=subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
        procs.append(proc)
        return proc

    try:
        hold("flock", others[0])
        hold("posix", others[1])
        posix_on_gate = hold("posix", lock)  # not a flock: not the gate's holder
        assert write_gate.describe_holder(lock) is None
        holder = hold("flock", lock)
        hold("flock", others[2])
        hold("posix", others[3])
        said = write_gate.describe_holder(lock)
        assert said is not None and said.startswith(f"held by pid {holder.pid} ("), said
        assert str(posix_on_gate.pid) not in said
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert write_gate.describe_holder(lock) is None  # every holder gone
    assert write_gate.describe_holder(tmp_path / "missing.lock") is None
