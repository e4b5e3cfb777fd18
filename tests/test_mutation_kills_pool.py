"""The bounded pool behind ``Engine.run_many``, ``Engine.resume_many`` and
``Engine.recover`` (``flow/pool.py``): it hands at most ``2 * workers`` runs to
its threads at a time, so recovering many thousands of runs never queues them
all at once (kill tests for mutants of ``pooled``; the engine's own tests
pin the threads, the order of the results and ``on_done``).

The items are a sequence that records each read: ``pooled`` reads an item
when it submits it, and again just before it reports it to ``on_done``
(which runs in the calling thread), so what had been submitted by each
report is known exactly, with no clock and no sleep.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, overload

import pytest

from desktop_app.flow.pool import pooled


class Recorded(Sequence[int]):
    """``0 .. n - 1``, recording each index read (from any thread)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.reads: list[int] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            raise TypeError("pooled never slices its items")
        if not 0 <= i < self.n:
            raise IndexError(i)
        with self._lock:
            self.reads.append(i)
        return i


@pytest.mark.parametrize(("workers", "n"), [(2, 10), (3, 7)])
def test_the_pool_holds_at_most_two_runs_per_thread_submitted(workers, n):
    """Before the k-th result is reported, ``min(n, 2 * workers + k - 1)``
    items were submitted: ``2 * workers`` at first, then one more for each
    that finished, never more (every item is submitted once, in order)."""
    items = Recorded(n)
    seen: list[tuple[int, int]] = []  # (item reported, reads of the sequence by then)

    def report(item: int, out: Any) -> None:
        assert out == f"ran {item}"
        seen.append((item, len(items.reads)))

    outs = pooled(items, lambda i: f"ran {i}", workers, report)
    assert outs == [f"ran {i}" for i in range(n)]
    assert sorted(item for item, _ in seen) == list(range(n))
    for k, (_, reads) in enumerate(seen, start=1):
        submitted = min(n, 2 * workers + k - 1)
        assert reads == submitted + k, (k, items.reads)  # k reads were for reports
    firsts = list(dict.fromkeys(items.reads))  # each item's first read submits it
    assert firsts == list(range(n))


def test_an_interrupted_caller_drops_what_has_not_started_and_stops_what_has() -> None:
    """Ctrl-C in the calling thread (here: raised by ``on_done``, which runs
    there): the items not started never run, those in flight see ``stop``
    set (a run stops before its next step) and end, ``stop`` is cleared
    again once they have, and the KeyboardInterrupt goes on."""
    stop = threading.Event()
    started: list[int] = []
    saw_stop: list[int] = []

    def fn(i: int) -> Any:
        started.append(i)
        if i == 0:
            return "first"
        while not stop.is_set():  # "steps", the event read between them as a run does
            time.sleep(0.005)
        saw_stop.append(i)
        return "stopped"

    def on_done(item: int, out: Any) -> None:
        deadline = time.monotonic() + 10
        while not {1, 2} <= set(started):  # both threads busy with a "run"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pooled(list(range(20)), fn, 2, on_done, stop)
    assert sorted(started) == [0, 1, 2]  # the one queued (3) was dropped, never started
    assert sorted(saw_stop) == [1, 2]  # each in flight stopped
    assert not stop.is_set()  # cleared: the engine goes on serving


def test_with_no_stop_event_an_interrupted_caller_waits_for_those_in_flight() -> None:
    """Without ``stop`` (nothing to ask them), the runs in flight end on
    their own before the exception goes on, and the queued ones never
    start."""
    started: list[int] = []
    finished: list[int] = []

    def fn(i: int) -> Any:
        started.append(i)
        if i != 0:
            time.sleep(0.3)
        finished.append(i)
        return i

    def on_done(item: int, out: Any) -> None:
        deadline = time.monotonic() + 10
        while not {1, 2} <= set(started):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pooled(list(range(20)), fn, 2, on_done)
    assert sorted(finished) == [0, 1, 2]  # waited for: not left running behind the caller
    assert sorted(started) == [0, 1, 2]  # the queued one dropped


def test_a_stop_set_by_someone_else_is_left_set() -> None:
    stop = threading.Event()
    stop.set()  # the app is quitting, say

    def on_done(item: int, out: Any) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pooled(list(range(4)), lambda i: i, 2, on_done, stop)
    assert stop.is_set()
