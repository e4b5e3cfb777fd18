"""Who owns a lease, and when that owner is presumed dead (``flow/owners.py``).

Recovery takes over a lease at once when its owner is a process of this host
that is gone; every wrong answer here either runs a step twice (a live owner
presumed dead) or stalls a run until its lease expires (a dead one presumed
alive). Each test uses real processes: a stopped one, a zombie whose name
holds ")", an owner on another host, and init seen by an ordinary user.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from desktop_app.flow import owners
from desktop_app.flow.owners import new_owner, owner_is_dead

HOST = socket.gethostname()
ROOT = Path(__file__).resolve().parents[1]


def _proc_state(pid: int) -> bytes:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]


def _wait_state(pid: int, state: bytes) -> None:
    """Poll /proc until ``pid`` is in ``state`` (a signal is delivered
    asynchronously); the state change is the event waited for."""
    deadline = time.monotonic() + 30
    while _proc_state(pid) != state:
        assert time.monotonic() < deadline, f"pid {pid} never reached state {state!r}"
        time.sleep(0.005)


def _pending_signals(pid: int) -> int:
    """The signals queued for ``pid`` and its thread group, as a bit mask."""
    fields = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)


def _dead_pid() -> int:
    """A pid that names no process here: a child that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_an_owner_id_is_host_pid_six_hex_digits_and_the_process_start_time():
    owner = new_owner()
    start = Path(f"/proc/{os.getpid()}/stat").read_bytes().rsplit(b")", 1)[1].split()[19]
    assert re.fullmatch(rf"{re.escape(HOST)}:{os.getpid()}:[0-9a-f]{{6}}@{int(start)}", owner)
    assert new_owner() != owner  # the nonce tells two owners of one process apart


def test_only_the_pid_field_is_read_even_when_the_nonce_holds_colons():
    dead = _dead_pid()
    assert owner_is_dead(f"{HOST}:{dead}:worker:2")
    assert not owner_is_dead(f"{HOST}:{os.getpid()}:worker:2")  # this process


def test_an_owner_on_another_host_is_never_presumed_dead():
    """Its pid means nothing here, even one that names no process on this host:
    its lease must expire instead."""
    dead = _dead_pid()
    assert owner_is_dead(f"{HOST}:{dead}:n")
    assert not owner_is_dead(f"not-{HOST}:{dead}:n")
    assert not owner_is_dead(f"{HOST}:notapid:n")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_asking_whether_a_process_lives_sends_it_nothing():
    """The liveness probe is signal 0, which checks without delivering. A
    stopped process keeps any other signal pending, so one sent by mistake
    would show in its pending mask (SIGHUP would end a live worker)."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        _wait_state(child.pid, b"T")
        assert not owner_is_dead(f"{HOST}:{child.pid}:n")
        assert _pending_signals(child.pid) == 0
        assert _proc_state(child.pid) == b"T"
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_zombie_whose_name_holds_parentheses_is_dead():
    """``/proc/<pid>/stat`` is ``pid (comm) state ...`` and comm may hold ")"
    and spaces: the state is read after the last ")"."""
    code = (
        "import os, signal\n"
        "open('/proc/self/comm', 'w').write('w) R (x')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        _wait_state(child.pid, b"Z")  # killed, not reaped: no wait() yet
        assert b"(w) R (x)" in Path(f"/proc/{child.pid}/stat").read_bytes()
        assert owner_is_dead(f"{HOST}:{child.pid}:n")
    finally:
        child.wait()


def test_without_a_proc_entry_a_process_counts_as_alive():
    """Where ``/proc/<pid>/stat`` cannot be read (macOS has no /proc), a process
    that answered signal 0 is taken as alive, never as a zombie."""
    assert owners._is_zombie(_dead_pid()) is False


def test_a_process_this_user_may_not_signal_is_alive():
    """Signal 0 to another user's process fails with EPERM: it exists, so its
    owner is alive. Run as an ordinary user (root may signal anything: the
    check then runs in a child that drops to nobody)."""
    code = (
        "import os, socket, sys\n"
        "from desktop_app.flow.owners import owner_is_dead\n"  # imported while readable
        "if os.geteuid() == 0:\n"
        "    os.setgid(65534); os.setuid(65534)\n"
        "print(os.geteuid(), owner_is_dead(f'{socket.gethostname()}:1:n'))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/", timeout=60
    )
    assert out.returncode == 0, out.stderr
    uid, answer = out.stdout.split()
    assert uid != "0" and answer == "False"


def test_a_pid_another_process_has_now_is_not_the_owner():
    """After a reboot (or a wrap-around) the pid of a dead owner may name a
    live process again: the start time the owner id records tells them apart."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = int(Path(f"/proc/{child.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])
        assert owners.liveness(f"{HOST}:{child.pid}:abcdef@{start}") == "alive"
        assert owners.liveness(f"{HOST}:{child.pid}:abcdef@{start + 1}") == "dead"
        assert owners.liveness(f"{HOST}:{child.pid}:abcdef") == "alive"  # no start recorded
        me = new_owner()
        assert owners.liveness(me) == "alive"
        assert owners.liveness(me.rsplit("@", 1)[0] + "@1") == "dead"  # an earlier holder of my pid
    finally:
        child.kill()
        child.wait()
