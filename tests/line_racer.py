"""A long-lived racer process a test drives line by line (stdin in, stdout
out): the parent sends each round's line, reads ``ready <round>``, creates
the GO file that releases every racer at once, then reads ``done <round>
<JSON>``. Used by tests/test_settle_race_processes.py,
tests/test_answer_race_mcp.py, tests/test_cancel_race_agent_end.py and, with
:data:`CLI_RACER` (tests/cli_racer.py), by the ``db copy``, ``export`` and
``undo`` races."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: seconds a racer may stay silent before the test fails
LIMIT_S = 120.0
#: the racer that runs a CLI command (or a dispatcher, or a run) per round
CLI_RACER = REPO / "tests" / "cli_racer.py"


class LineRacer:
    """``python SCRIPT ARGS...`` (cwd the repository) driven by lines."""

    def __init__(self, script: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def task(self, rnd: int, **task: Any) -> None:
        """Round ``rnd`` of :data:`CLI_RACER`: ``task`` as its docstring says
        (``go``, ``do``, ``args``, ``env``, ``delay``); then read ``ready``."""
        self.send(f"round {rnd} {json.dumps(task)}")
        said = self.line()
        assert said == f"ready {rnd}", said

    def line(self) -> str:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(LIMIT_S):
                self.proc.kill()
                raise AssertionError(f"racer {self.proc.pid} said nothing for {LIMIT_S} s")
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(LIMIT_S)
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"racer {self.proc.pid} exited {self.proc.returncode}:\n{err}")
        return line.strip()

    def told(self, rnd: int) -> dict[str, Any]:
        """The JSON of the racer's ``done <rnd> <JSON>`` line."""
        line = self.line()
        assert line.startswith(f"done {rnd} "), line
        return json.loads(line.split(" ", 2)[2])  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.send("end")
            self.proc.stdin.close()
        self.proc.wait(LIMIT_S)
        assert self.proc.returncode == 0, self.proc.stderr.read() if self.proc.stderr else ""
