"""Ctrl-C inside the confined folder walk is a KeyboardInterrupt, never an
OSError a caller takes for an unreadable file.

Found by sending SIGINT to ``flowdesk run digest`` at its first progress
line, 1 time in 5 to 12: the run went on to its end and exited 0. CPython
ran the handler right after ``os.close`` returned in ``confined._walk``; the
clean-up closed the same descriptor again, and that ``EBADF`` replaced the
KeyboardInterrupt, which the digest then took for an unreadable file. The
test raises KeyboardInterrupt exactly there (a profile hook on that call's
return, where a signal's handler runs), on a real folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from desktop_app.flows import confined


def _interrupt_after_a_close_in_walk(frame, event, arg):  # type: ignore[no-untyped-def]
    if event == "c_return" and arg is os.close and frame.f_code.co_name == "_walk":
        sys.setprofile(None)
        raise KeyboardInterrupt


@pytest.mark.parametrize("depth", [1, 3])
def test_ctrl_c_right_after_a_close_in_the_walk_stays_a_keyboard_interrupt(
    tmp_path: Path, depth: int
) -> None:
    folder = tmp_path.joinpath(*[f"d{i}" for i in range(depth)])
    folder.mkdir(parents=True)
    before = len(os.listdir("/proc/self/fd"))
    sys.setprofile(_interrupt_after_a_close_in_walk)
    try:
        with pytest.raises(KeyboardInterrupt):
            confined.open_dir(folder.resolve())
    finally:
        sys.setprofile(None)
    assert len(os.listdir("/proc/self/fd")) == before  # nothing left open either
