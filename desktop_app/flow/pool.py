"""Driving several runs at once: one function over many items on a bounded
pool of threads, results in input order. Used by ``Engine.run_many``,
``Engine.resume_many`` and recovery; imports neither the driver nor the engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from queue import SimpleQueue
from typing import Any

from desktop_app.flow.results import RunResult

#: one run's outcome: its result, or the ``FlowdeskError`` that stopped it
Outcome = RunResult | BaseException


def pooled(
    items: Sequence[Any],
    fn: Callable[[Any], Outcome],
    workers: int,
    on_done: Callable[[Any, Outcome], None] | None,
    stop: threading.Event | None = None,
) -> list[Outcome]:
    """``fn`` over ``items`` on at most ``workers`` threads, at most
    ``2 * workers`` submitted at a time; results in input order.
    ``on_done(item, outcome)`` is called in the calling thread as each ends.

    When the calling thread is interrupted (Ctrl-C, SIGTERM's
    ``Terminated``, any exception), the items not started yet are dropped,
    and ``stop`` (the engine's shutdown event: a run stops before its next
    step, and stays resumable) is set until those in flight have stopped,
    then the exception goes on. Before, the pool's exit waited for every
    run in flight to run to its end: Ctrl-C on ``resume --all`` with two
    interrupted runs finished both, then said "interrupted".

    Raises:
        ValueError: ``workers`` is below 1.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    out: list[Outcome | None] = [None] * len(items)
    if workers == 1 or len(items) <= 1:
        for i, item in enumerate(items):
            out[i] = fn(item)
            if on_done is not None:
                on_done(item, out[i])  # type: ignore[arg-type]
        return out  # type: ignore[return-value]
    pending: dict[Future[Outcome], int] = {}
    # each future puts itself here when done: taking the next finished one
    # costs the same however many are pending (``wait(FIRST_COMPLETED)``
    # hooked a waiter onto every pending future at every call)
    finished: SimpleQueue[Future[Outcome]] = SimpleQueue()
    nxt = 0
    pool = ThreadPoolExecutor(workers, thread_name_prefix="flowdesk-run")
    try:
        while nxt < len(items) or pending:
            while nxt < len(items) and len(pending) < 2 * workers:
                fut = pool.submit(fn, items[nxt])
                pending[fut] = nxt
                fut.add_done_callback(finished.put)
                nxt += 1
            fut = finished.get()
            i = pending.pop(fut)
            out[i] = fut.result()
            if on_done is not None:
                on_done(items[i], out[i])  # type: ignore[arg-type]
    except BaseException:
        if stop is not None and not stop.is_set():
            stop.set()
            try:
                pool.shutdown(cancel_futures=True)
            finally:
                stop.clear()  # the engine goes on serving (a library's caller)
        raise
    finally:
        pool.shutdown(cancel_futures=True)
    return out  # type: ignore[return-value]
