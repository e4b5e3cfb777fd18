"""Agent runs this process drives (in the app, each on a worker thread), and
how to ask them all to stop: the app's quit. Two kinds: a Pydantic AI run on
an event loop of its own (``asyncio.run``: :func:`driving`, stopped by
canceling its task) and a run of Flowdesk's own agent runtime, synchronous
(:func:`driving_thread`, stopped at the runtime's next turn boundary or
tool call: :func:`stop_asked`, :class:`DriveStopped`).

A stopped drive ends as Ctrl-C ends one: a tool call in flight runs to its
end and its result is saved first, then the run stops before its next
model request or tool call and stays interrupted (resumed at the next
launch, by ``flowdesk resume`` or a ``flowdesk agent`` pass). Without the
wait, the app closed its database while an approved call ran: the call's
result could not be saved and the next resume had to report its outcome
unknown.

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
#: one event per synchronous drive in progress, set to ask it to stop
_threads: set[threading.Event] = set()
_local = threading.local()


class DriveStopped(Exception):
    """Raised by Flowdesk's own agent runtime at a turn boundary or before a
    tool call when :func:`stop_all` asked its drive to stop (the app quits):
    the run stops there, its tool calls so far saved, and stays interrupted
    (its lease given back), to be resumed later. ``args[0]``: the run id.
    Nobody sees it: the app that asked is quitting."""


@contextmanager
def driving_thread() -> Iterator[None]:
    """Register the calling thread's synchronous drive (the own runtime's
    ``Agent`` calls in the block) as one :func:`stop_all` may stop, for
    the block: it stops at its next :func:`stop_asked` check."""
    stop = threading.Event()
    with _lock:
        _threads.add(stop)
    _local.stop = stop
    try:
        yield
    finally:
        _local.stop = None
        with _lock:
            _threads.discard(stop)
            _lock.notify_all()


def stop_asked() -> bool:
    """Whether :func:`stop_all` asked the calling thread's drive to stop
    (``False`` outside :func:`driving_thread`)."""
    stop: threading.Event | None = getattr(_local, "stop", None)
    return stop is not None and stop.is_set()


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


def in_flight() -> int:
    """How many drives are registered now (each may be inside a tool call)."""
    with _lock:
        return len(_drives) + len(_threads)


def stop_all(timeout_s: float) -> int:
    """Ask every registered drive to stop (a task canceled on its own
    loop, thread-safe; a synchronous drive's stop asked) and wait up to
    ``timeout_s`` seconds for them to end; returns how many were still
    running after the wait (0: all ended, their tool calls in flight
    saved)."""
    with _lock:
        for loop, task in _drives:
            loop.call_soon_threadsafe(task.cancel)
        for stop in _threads:
            stop.set()
        deadline = time.monotonic() + timeout_s
        while _drives or _threads:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            _lock.wait(left)
        return len(_drives) + len(_threads)
