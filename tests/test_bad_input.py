"""Bad input on the command line is one line on stderr and exit 2, never a
traceback or a hang: JSON nested 100,000 deep, a settings file that is not
text, and a ``--db`` that is a folder, a FIFO, a socket or a device.
Real ``flowdesk`` processes, real files."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from tests.cli_support import flowdesk

DEEP = "[" * 100_000  # one argument must stay under Linux's 128 KiB limit


def one_line_exit_2(out) -> str:
    """The refusal: exit 2, one ``flowdesk:`` line on stderr, no traceback."""
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowdesk: "), out.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize(
    "args, what",
    [
        (["start", "approval", "--input", DEEP], "--input"),
        (["signal", "paid", "o-1", "--payload", DEEP], "--payload"),
        (["answer", "ffffffff", DEEP, "--value-json"], "VALUE"),
    ],
)
def test_json_nested_100000_deep_is_refused_in_one_line(db_path, args, what):
    line = one_line_exit_2(flowdesk(db_path, *args, timeout=60))
    assert f"{what} is nested too deeply" in line and "flatter JSON" in line


BIG = "1" + "0" * 5000  # past the 4,300 digits int() converts


@pytest.mark.parametrize(
    "args, what",
    [
        (["start", "approval", "--input", f'{{"n": {BIG}}}'], "--input"),
        (["signal", "paid", "o-1", "--payload", f'{{"a": -{BIG}}}'], "--payload"),
        (["publish", "paid", "--payload", f"[{BIG}]"], "--payload"),
    ],
)
def test_a_whole_number_of_5001_digits_is_refused_in_one_line(db_path, args, what):
    line = one_line_exit_2(flowdesk(db_path, *args, timeout=60))
    assert f"{what} holds a whole number of 5,001 digits" in line and "as a string" in line


def test_an_input_file_nested_100000_deep_is_refused_in_one_line(db_path, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    line = one_line_exit_2(flowdesk(db_path, "start", "approval", "--input-file", str(deep)))
    assert "--input-file is nested too deeply" in line


@pytest.mark.parametrize(
    "content",
    [
        b'db_path = "x"\n\xff\xfe\x00\x01',
        b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)),
        b"scope = 'a'\x00\n",
    ],
    ids=["not-utf8", "elf-binary", "nul-byte"],
)
def test_a_binary_settings_file_is_refused_in_one_line(db_path, tmp_path, content):
    config = tmp_path / "config.toml"
    config.write_bytes(content)
    line = one_line_exit_2(flowdesk(db_path, "runs", env={"FLOWDESK_CONFIG": str(config)}))
    assert f"the settings file {config} is not" in line
    assert "FLOWDESK_CONFIG" in line  # what to do


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "a FIFO (named pipe)"


def _folder(path: Path) -> str:
    path.mkdir()
    return "a folder"


@pytest.mark.parametrize("make", [_fifo, _folder], ids=["fifo", "folder"])
def test_a_db_that_is_not_a_regular_file_is_refused_without_opening_it(tmp_path, make):
    path = tmp_path / "flowdesk.db"
    kind = make(path)
    for args in (["runs"], ["db", "apply"], ["signal", "paid", "o-1"]):
        line = one_line_exit_2(flowdesk(path, *args, timeout=20))  # a FIFO used to hang here
        assert line == (
            f"flowdesk: {path} is {kind}, not a database file; nothing was opened. "
            "Use the path of a database file, or of a new one (--db PATH)."
        )
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-journal").exists()


def test_a_db_that_is_a_socket_or_a_device_is_refused(tmp_path):
    sock_path = tmp_path / "s.db"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        line = one_line_exit_2(flowdesk(sock_path, "runs", timeout=20))
    assert f"{sock_path} is a socket, not a database file" in line
    before = os.stat("/dev/null").st_mode
    line = one_line_exit_2(flowdesk("/dev/null", "runs", timeout=20))
    assert "/dev/null is a character device, not a database file" in line
    assert os.stat("/dev/null").st_mode == before  # never made private: it is the system's


@pytest.mark.parametrize(
    "args",
    [
        ["agent", "--poll", "inf"],  # a traceback (OverflowError) once serving
        ["agent", "--poll", "0"],  # a loop that never paused: a core kept busy
        ["agent", "--poll", "-1"],
        ["agent", "--poll", "nan"],
        ["agent", "--concurrency", "0"],  # a worker that would claim nothing
        ["agent", "--concurrency", "-3"],
        ["watch", "--interval", "-1"],  # ValueError: sleep length must be non-negative
        ["watch", "--interval", "1e300"],  # OverflowError
        ["watch", "--interval", "0"],
    ],
)
def test_a_pause_or_concurrency_out_of_range_is_a_usage_error_before_anything_runs(db_path, args):
    """``--poll``/``--interval`` take seconds above 0 and at most a day, and
    ``--concurrency`` 1 or more: anything else is exit 2 naming the option,
    before the agent serves or watch looks (each of these was a traceback, a
    busy loop or a worker that never claimed, and the agent ran until killed)."""
    out = flowdesk(db_path, *args, timeout=30)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    assert f"argument {args[1]}:" in out.stderr, out.stderr
    assert "serving" not in out.stderr and out.stdout == ""


def test_a_pause_in_range_is_taken(db_path):
    """The bounds refuse nothing a user means: ``watch --interval 0.05``
    of a run that does not exist is the unknown-run refusal, not a usage
    error about the interval."""
    out = flowdesk(db_path, "watch", "--interval", "0.05", "nosuchrun", timeout=30)
    assert out.returncode == 2 and "no run nosuchrun" in out.stderr, out.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e300"])
def test_a_model_timeout_out_of_range_is_a_settings_error_and_no_run_is_left(db_path, value):
    """``[model] timeout_s`` (``FLOWDESK_MODEL__TIMEOUT_S``) is seconds above
    0 and at most a day: ``inf``, ``nan``, ``-1`` and ``1e300`` were taken and
    ``ask`` died with a traceback at its first connection, leaving an agent
    run ``interrupted`` that every resume failed the same way."""
    env = {
        "FLOWDESK_MODEL__BASE_URL": "http://127.0.0.1:9/v1",
        "FLOWDESK_MODEL__MODEL": "m",
        "FLOWDESK_MODEL__TIMEOUT_S": value,
    }
    line = one_line_exit_2(flowdesk(db_path, "ask", "hi", env=env, timeout=60))
    assert "model.timeout_s" in line and "FLOWDESK_" in line, line
    listed = flowdesk(db_path, "runs", "--kind", "agent", "-o", "json", timeout=60)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stdout


def test_a_limit_too_big_for_the_database_is_a_usage_error(db_path):
    """``runs --limit`` above the largest whole number the database stores
    was an OverflowError traceback (exit 1); now exit 2 naming the bound,
    and the bound itself lists every run."""
    out = flowdesk(db_path, "runs", "--limit", str(2**63), timeout=60)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    assert f"argument --limit: {2**63} is too big (at most {2**63 - 1})" in out.stderr
    most = flowdesk(db_path, "runs", "--limit", str(2**63 - 1), timeout=60)
    assert most.returncode == 0, most.stderr


def test_an_escape_sequence_in_an_unknown_run_id_is_shown_not_run(db_path):
    """The refusal repeats the id it was given: an id holding an escape
    sequence (pasted from a log, a chat) showed it raw, so the terminal
    cleared its screen and set its title; now it shows as text."""
    out = flowdesk(db_path, "show", "ab\x1b[2J\x1b]0;pwned\x07", timeout=60)
    line = one_line_exit_2(out)
    assert "\x1b" not in out.stderr and "\x07" not in out.stderr
    assert "no run ab\\x1b[2J\\x1b]0;pwned\\x07 in scope 'default'" in line, line
