"""Agent runs this process drives on an event loop of their own (a Pydantic
AI run's ``asyncio.run``, in the app on a worker thread), and how to ask
them all to stop: the app's quit.

A stopped drive ends as Ctrl-C ends one (its task canceled): a tool call
in flight runs to its end and its result is saved first, then the run
stops before its next model request or tool call and stays interrupted
(resumed at the next launch, by ``flowdesk resume`` or a ``flowdesk agent``
pass). Without the wait, the app closed its database while an approved
call ran: the call's result could not be saved and the next resume had to
report its outcome unknown.

This module imports no agent framework.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Condition()
_drives: set[tuple[asyncio.AbstractEventLoop, asyncio.Task[object]]] = set()


@contextmanager
def driving() -> Iterator[None]:
    """Register the running task as a drive :func:`stop_all` may stop, for
    the block. Call it inside the task (an ``async`` function)."""
    task = asyncio.current_task()
    if task is None:  # not inside a task: nothing to cancel
        yield
        return
    entry = (asyncio.get_running_loop(), task)
    with _lock:
        _drives.add(entry)
    try:
        yield
    finally:
        with _lock:
            _drives.discard(entry)
            _lock.notify_all()


def stop_all(timeout_s: float) -> int:
    """Ask every registered drive to stop (its task canceled on its own
    loop, thread-safe) and wait up to ``timeout_s`` seconds for them to
    end; returns how many were still running after the wait (0: all
    ended, their tool calls in flight saved)."""
    with _lock:
        for loop, task in _drives:
            loop.call_soon_threadsafe(task.cancel)
        deadline = time.monotonic() + timeout_s
        while _drives:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            _lock.wait(left)
        return len(_drives)
