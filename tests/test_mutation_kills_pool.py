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
