"""Running the real `flowdesk` command in a subprocess, for CLI tests."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.cli_forkserver import default_sigint as default_sigint

REPO = Path(__file__).resolve().parents[1]


def install_hint(extra: str) -> str:
    """The command Flowdesk prints to install ``extra`` when it runs, as
    here, from an editable install of this checkout: this interpreter's pip,
    the extra from this checkout."""
    return f"{shlex.quote(sys.executable)} -m pip install -e {shlex.quote(f'{REPO}[{extra}]')}"


def flowdesk(
    db: Path | str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``flowdesk --db DB ARGS...`` run from this checkout (``python -m
    desktop_app.cli``) in a process of its own, stdout and stderr captured as
    text (forked from :mod:`tests.cli_forkserver`, which skips the
    interpreter's start-up and imports).

    Args:
        env: variables set over this process's environment.
        timeout: seconds before the subprocess is killed (the test then fails).
    """
    return cli_forkserver.run(
        ["--db", str(db), *args], env={**os.environ, **(env or {})}, cwd=REPO, timeout=timeout
    )


def as_printed(
    command: str, env: dict[str, str], timeout: float = 60, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a suggested command exactly as printed (``flowdesk`` is this
    checkout, in a process of its own forked from :mod:`tests.cli_forkserver`;
    ``input``: its standard input); leading ``NAME=value`` words set those
    variables for it, as a shell does."""
    argv = shlex.split(command)
    while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
        name, value = argv.pop(0).split("=", 1)
        env = {**env, name: value}
    assert argv[0] == "flowdesk", command
    return cli_forkserver.run(argv[1:], env=env, cwd=REPO, timeout=timeout, input=input)


def spawn(
    *args: str, env: dict[str, str] | None = None, new_session: bool = False
) -> cli_forkserver.ForkedProcess | subprocess.Popen[str]:
    """``flowdesk ARGS...`` (give ``--db`` yourself) started as a child the
    test can read line by line and signal: stdout and stderr piped as text,
    ``env`` set over this process's environment. ``new_session``: in a
    session of its own, for a child the test stops with SIGSTOP: in the
    test's process group, a stopped child gets SIGHUP from the kernel when
    the group is left orphaned by another member's exit (a CI run's
    "returncode -1"). Forked from :mod:`tests.cli_forkserver` (a real
    process of its own: a :class:`~tests.cli_forkserver.ForkedProcess`)."""
    return cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        start_new_session=new_session,
    )


def interrupted_at(
    function: str, argv: list[str], *, sigterm: bool = False
) -> subprocess.CompletedProcess[str]:
    """``flowdesk ARGV`` in a process of its own, stopped when ``function``
    is first called: Ctrl-C's KeyboardInterrupt raised there (as Ctrl-C
    raises it there), or with ``sigterm`` SIGTERM sent to the process there
    (met by whatever handler it has installed by then)."""
    stop = "os.kill(os.getpid(), signal.SIGTERM)" if sigterm else "raise KeyboardInterrupt"
    code = (
        "import os, signal, sys\n"
        "from desktop_app.cli import main\n"
        "def trace(frame, event, arg):\n"
        f"    if event == 'call' and frame.f_code.co_name == {function!r}:\n"
        "        sys.settrace(None)\n"
        f"        {stop}\n"
        "sys.settrace(trace)\n"
        f"sys.exit(main({argv!r}))\n"
    )
    return cli_forkserver.run_code(code, env={**os.environ}, cwd=REPO, timeout=120)


def stop_agent(agent: subprocess.Popen[str], timeout: float = 60) -> None:
    """A test's end of a ``flowdesk agent`` child: SIGTERM (it stops after
    the steps in flight), waited up to ``timeout`` seconds (raising
    ``TimeoutExpired`` as :meth:`~subprocess.Popen.wait` does), and
    SIGKILL if it is still there then, so no agent outlives its test."""
    agent.send_signal(signal.SIGTERM)
    try:
        agent.wait(timeout=timeout)
    finally:
        if agent.poll() is None:
            agent.kill()


def serving(agent: subprocess.Popen[str]) -> str:
    """Read ``flowdesk agent``'s stderr (piped, as :func:`spawn` does) up to
    its ``serving`` line (``worker ... on`` as a worker, on PostgreSQL),
    which it prints once its SIGTERM/SIGINT handler is in place: a signal
    sent before that stops it before it serves (exit 143 or 130), not the
    stop under test. Returns what it printed so far."""
    assert agent.stderr is not None
    said = ""
    while "flowdesk agent: serving" not in said and "flowdesk agent: worker" not in said:
        line = agent.stderr.readline()
        assert line, f"the agent exited before serving: {said}"
        said += line
    return said


def read_terminal(master: int) -> bytes:
    """Everything a process writes to the pseudo-terminal whose master side
    is ``master`` until it closes its side (EOF, or EIO on Linux)."""
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def user_db(request: pytest.FixtureRequest, tmp_path: Path, env: dict[str, str]) -> str:
    """The database a user gives with ``--db``, for a fixture parametrized
    ``"sqlite"``/``"postgres"``: a SQLite file in ``tmp_path`` with its schema
    applied as the README says (``flowdesk db apply``, with ``env``), or a
    fresh PostgreSQL database (the ``pg_url`` fixture)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    path = str(tmp_path / "f.db")
    applied = flowdesk(path, "db", "apply", env=env)
    assert applied.returncode == 0, applied.stderr
    return path
