"""Ctrl-C never leaves a Flowdesk process hung on its way out.

Found in CI: Ctrl-C on ``flowdesk run digest`` left the process alive at 0%
CPU for ever. The write gate woke its reaper thread with a
``threading.Event``, whose ``set()`` is Python code around a lock; the
``KeyboardInterrupt`` landed inside it, after the lock was taken and before
it was given back, and the exit hook that ends the reaper then waited on that
lock for ever. A signal lands only at some instructions, rarely inside those
few: sending real SIGINTs to a running command found it once in many CI
runs. So the test raises ``KeyboardInterrupt`` at *every* instruction of two
write transactions' way through the gate (``tests/interrupt_at_every_opcode.py``,
one forked child per instruction, each on a real SQLite file) and asserts
that every child ends at once with Ctrl-C's exit status.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import cli_forkserver

PROBE = Path(__file__).with_name("interrupt_at_every_opcode.py")


@pytest.mark.slow
def test_ctrl_c_at_every_instruction_of_a_write_ends_the_process_at_once(tmp_path):
    done = cli_forkserver.run_script(PROBE, [str(tmp_path / "f.db")], timeout=600)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["instructions"] > 100  # the gate's code and its locks' were reached
    assert seen["hung"] == [], done.stderr[-4000:]  # faulthandler's stacks of one hung child
    assert seen["exits"] == {"130": seen["instructions"]}
    assert seen["slow"] == []  # none waited out the exit hook's bound on the reaper
