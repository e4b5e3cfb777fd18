"""``flowdesk`` on a terminal (a real pseudo-terminal) and ``watch``:
progress is one updating line with rate and ETA, ``NO_COLOR`` removes colour,
piped output stays plain lines; ``watch`` follows runs live."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from tests import cli_forkserver
from tests.cli_support import default_sigint, read_terminal
from tests.digest_corpus import make_corpus

REPO = Path(__file__).resolve().parents[1]
#: an SGR escape that sets a foreground/background colour
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|4[0-8]|9[0-7]|10[0-7])(?:;[0-9;]*)?m")


def flowdesk(*args: str, env: dict[str, str] | None = None):
    return cli_forkserver.run(list(args), env={**os.environ, **(env or {})}, cwd=REPO, timeout=120)


def digest_on_a_terminal(tmp_path: Path, name: str, extra_env: dict[str, str]) -> tuple[str, str]:
    """Run ``run digest`` with stderr on a pseudo-terminal; (stdout, terminal bytes)."""
    db = tmp_path / f"{name}.db"
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update({"TERM": "xterm-256color", "COLUMNS": "120", **extra_env})
    proc = cli_forkserver.popen(
        [
            sys.executable,
            "-m",
            "desktop_app.cli",
            "--db",
            str(db),
            "run",
            "digest",
            "--folder",
            str(tmp_path / "docs"),
            "--out",
            str(tmp_path / f"out-{name}"),
        ],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
    )
    os.close(slave)
    term = read_terminal(master)
    os.close(master)
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    assert proc.wait(timeout=120) == 0
    return stdout, term.decode(errors="replace")


def test_progress_is_one_line_with_rate_and_eta_and_no_color_is_honoured(tmp_path):
    make_corpus(tmp_path / "docs", 300)
    stdout, term = digest_on_a_terminal(tmp_path, "colour", {})
    assert re.fullmatch(r"[0-9a-f]{32}", stdout.splitlines()[0])
    assert "300/300" in term and "ETA" in term
    assert re.search(r"[\d,]+/s", term), term[-2000:]  # a rate
    plain_lines = [
        ln for ln in term.replace("\r", "\n").split("\n") if re.fullmatch(r"\s+\d+/300", ln)
    ]
    assert plain_lines == []  # updated in place, not one line per update
    assert COLOUR.search(term)  # a terminal gets colour by default
    _, mono = digest_on_a_terminal(tmp_path, "mono", {"NO_COLOR": "1"})
    assert "300/300" in mono and not COLOUR.search(mono)
    piped = flowdesk(
        "--db",
        str(tmp_path / "colour.db"),
        "run",
        "digest",
        "--new",
        "--folder",
        str(tmp_path / "docs"),
        "--out",
        str(tmp_path / "out-piped"),
    )
    assert piped.returncode == 0 and "\x1b[" not in piped.stderr
    assert re.search(r"^\s+300/300$", piped.stderr, re.M)


def test_watch_follows_a_run_until_it_ends(tmp_path):
    db = tmp_path / "f.db"
    d = ["--db", str(db)]
    env = {"FLOWDESK_FLOWS": '["desktop_app.examples.approval:approval"]'}
    assert flowdesk(*d, "db", "apply").returncode == 0
    run_id = flowdesk(*d, "start", "approval", "--input", '{"order": "o-1"}', env=env).stdout
    run_id = run_id.splitlines()[0]
    watch = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", *d, "watch", run_id[:8], "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
    )
    assert watch.stdout is not None
    first = watch.stdout.readline()
    assert f"{run_id}  flow approval  waiting" in first
    assert flowdesk(*d, "answer", run_id[:8], "yes", env=env).returncode == 0
    assert flowdesk(*d, "signal", "paid", "o-1", env=env).returncode == 0
    rest = watch.stdout.read()
    assert watch.wait(timeout=60) == 0
    assert rest.strip().splitlines()[-1].endswith("approval  completed  -")
    every = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", *d, "watch", "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        preexec_fn=default_sigint,
    )
    assert every.stdout is not None
    assert f"{run_id}  flow approval  completed" in every.stdout.readline()
    every.send_signal(2)  # Ctrl-C ends watching as the README says: 130, and how to go on
    _, err = every.communicate(timeout=60)
    assert every.returncode == 130
    assert f"interrupted; run `flowdesk --db {db} watch` to continue" in err


def rerun_on_a_terminal(db: Path, folder: Path, out: Path, reply: bytes) -> tuple[str, str]:
    """``run digest`` with stdin/stderr on a pseudo-terminal, answering the
    resume question with ``reply``; (stdout, terminal text)."""
    master, slave = pty.openpty()
    proc = cli_forkserver.popen(
        [
            sys.executable,
            "-m",
            "desktop_app.cli",
            "--db",
            str(db),
            "run",
            "digest",
            "--folder",
            str(folder),
            "--out",
            str(out),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=slave,
        cwd=REPO,
        env={**os.environ, "TERM": "xterm"},
    )
    os.close(slave)
    seen = b""
    while b"Resume it? [Y/n; n cancels it and starts a new run] " not in seen:
        seen += os.read(master, 4096)
    os.write(master, reply)
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    assert proc.wait(timeout=120) == 0
    seen += read_terminal(master)  # what it wrote to the terminal after the reply
    os.close(master)
    return stdout, seen.decode()


def test_rerun_on_a_terminal_asks_before_resuming(tmp_path):
    from desktop_app.bootstrap import open_services
    from desktop_app.config import load_settings
    from desktop_app.flows import builtin_flow_key as input_flow_key
    from desktop_app.flows.digest import check_input

    db, folder, out = tmp_path / "f.db", tmp_path / "docs", tmp_path / "o"
    make_corpus(folder, 5)
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    given = check_input(folder, out).model_dump()
    sv = open_services(load_settings(db_path=db))
    pending = sv.engine.start("digest", given, flow_key=input_flow_key("digest", given))
    sv.close()  # an interrupted run of this input, as a crash leaves it
    stdout, term = rerun_on_a_terminal(db, folder, out, b"\n")  # default: yes
    assert f"run {pending} on this input is pending" in term
    assert stdout.splitlines()[0] == pending and f"run {pending} completed" in stdout
    rows = [json.loads(x) for x in flowdesk("--db", str(db), "runs", "--json").stdout.splitlines()]
    assert [r["run_id"] for r in rows] == [pending]
    sv = open_services(load_settings(db_path=db))
    second = sv.engine.start("digest", given, flow_key=input_flow_key("digest", given))
    sv.close()
    stdout, term = rerun_on_a_terminal(db, folder, out, b"n\n")  # no: a new run replaces it
    fresh = stdout.splitlines()[0]
    assert fresh not in (pending, second) and f"run {fresh} completed" in stdout
    assert f"canceled pending run {second} on this input; starting a new run" in term
    rows = [json.loads(x) for x in flowdesk("--db", str(db), "runs", "--json").stdout.splitlines()]
    assert {r["run_id"]: r["status"] for r in rows} == {
        pending: "completed",
        second: "canceled",
        fresh: "completed",
    }


def test_a_hint_printed_after_a_progress_bar_is_one_line_at_80_columns(tmp_path: Path) -> None:
    """Found by a tryout: ``run tidy`` on an 80-column terminal printed its
    closing hint broken with a newline (``… answers it: flowdesk --db`` /
    ``/tmp/…/cli.db show …``: rich, whose progress line was still drawing,
    wrapped the line itself), so copying the line copied half a command,
    and the progress line was drawn again after it, the shell prompt glued
    to it. The bar now ends with the run, and its console never breaks a
    line."""
    import fcntl
    import struct
    import termios

    folder = tmp_path / "a-folder-with-a-long-name-so-the-hint-is-longer-than-80"
    folder.mkdir()
    for i in range(400):
        (folder / f"f{i}.txt").write_text("x")
    db = tmp_path / "a-database-with-a-long-name.db"
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS")}
    env["TERM"] = "xterm-256color"
    argv = ["--db", str(db), "run", "tidy", "--folder", str(folder)]
    proc = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        cwd=str(REPO),
        env=env,
    )
    os.close(slave)
    term = read_terminal(master).decode(errors="replace")
    os.close(master)
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term)
    label = "the command that answers it: "
    assert label in plain, plain[-2000:]
    after = plain[plain.rindex(label) + len(label) :]
    line, _, rest = after.partition("\n")
    assert re.fullmatch(rf"flowdesk --db {re.escape(str(db))} show [0-9a-f]{{32}}\r?", line), after
    assert rest.strip() == "", repr(rest)  # nothing drawn after it
