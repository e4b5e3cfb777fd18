"""A new user's report: `answer` whose run then failed in its process
printed only "run R failed", and `signal` printed "delivered to run R (now
failed)" with exit status 0: neither said why nor how to go on, where
`start` and `resume` print the error and `resume with:`. Both do now, the
exit status is 1, and the printed resume, run as printed once the cause is
fixed, completes the run. Real SQLite file, real `flowdesk` processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_support import as_printed, flowdesk
from tests.fail_after_wait_flows import FLOWS_ENV


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"FLOWDESK_FLOWS": FLOWS_ENV, "FLOWDESK_TEST_CHARGE_OK": str(tmp_path / "ok")}


def _start(db: Path, flow: str, env: dict[str, str]) -> str:
    out = flowdesk(db, "start", flow, "--input", json.dumps({"order": "o-7"}), env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[0]


def _resume_line(stderr: str) -> str:
    (line,) = [x for x in stderr.splitlines() if x.startswith("resume with: ")]
    return line.removeprefix("resume with: ")


@pytest.mark.parametrize("how", ["answer", "signal"])
def test_a_run_that_fails_after_an_answer_or_signal_says_why_and_how_to_resume(
    tmp_path: Path, env: dict[str, str], how: str
) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    if how == "answer":
        run = _start(db, "ask_then_fail", env)
        out = flowdesk(db, "answer", run, "yes", env=env)
        assert out.stdout.splitlines()[0] == f"run {run} failed", out.stdout
    else:
        run = _start(db, "signal_then_fail", env)
        out = flowdesk(db, "signal", "paid", "o-7", env=env)
        assert f"delivered to run {run} (now failed)" in out.stdout, out.stdout
    assert out.returncode == 1, out.stdout + out.stderr
    assert "error: " in out.stderr and "card declined" in out.stderr, out.stderr
    command = _resume_line(out.stderr)
    assert command == f"flowdesk --db {db} resume {run}"
    # show says it too (it printed no command for a failed run)
    shown = flowdesk(db, "show", run, env=env)
    assert f"failed: resume with: {command}" in shown.stdout, shown.stdout

    (tmp_path / "ok").touch()  # the cause fixed: the printed resume completes it
    resumed = as_printed(command, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run} completed" in resumed.stdout
    shown = json.loads(flowdesk(db, "show", run, "-o", "json", env=env).stdout)
    assert shown["status"] == "completed"
