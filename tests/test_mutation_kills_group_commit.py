"""What the group committer hands each caller when its backend misbehaves:
a backend that answers a batch with the wrong number of results fails every
request of that batch with a StoreError that says so, and the committer
takes the next batch as usual."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from desktop_app.errors import StoreError
from desktop_app.store.group_commit import AppendRequest, GroupCommitter
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.protocol import Checkpoint, RunRecord, StepRecord


def _cp(run_id: str, rev: int) -> Checkpoint:
    return Checkpoint(
        run_id, rev, "running", {"n": rev}, {"a": StepRecord("a", "in_progress")}, ("a",), 1.0
    )


class _ShortAnswer(InMemoryCheckpointStore):
    """Drops the last result of a batch while ``short`` is set (after
    committing the batch: the caller cannot tell which request it lost)."""

    short = True

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[BaseException | None]:
        results = super().append_batch(requests)
        return results[:-1] if self.short else results


def test_a_backend_answering_with_too_few_results_fails_the_batch_with_a_store_error():
    store = _ShortAnswer()
    store.create_run(RunRecord("r0", "f", "v", "running", 0, 1.0, 1.0), _cp("r0", 0))
    gc = GroupCommitter(store)
    with pytest.raises(StoreError) as caught:
        gc.append(AppendRequest(_cp("r0", 1)))
    assert str(caught.value) == "append_batch returned 0 results for 1 requests"
    assert (gc.batches, gc.appends) == (1, 1)
    store.short = False  # the committer is free again: the next batch goes through
    gc.append(AppendRequest(_cp("r0", 2)))
    assert store.get_run("r0").revision == 2
    assert (gc.batches, gc.appends) == (2, 2)


class _GatedShort(_ShortAnswer):
    """Holds the first batch until released; answers every batch short."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.entered = threading.Event()
        self.gate = threading.Event()

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[BaseException | None]:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.gate.wait(30)
        return super().append_batch(requests)


def test_every_request_of_a_short_answered_batch_gets_the_same_store_error():
    store = _GatedShort()
    for i in range(4):
        store.create_run(RunRecord(f"r{i}", "f", "v", "running", 0, 1.0, 1.0), _cp(f"r{i}", 0))
    gc = GroupCommitter(store)
    errors: dict[str, BaseException | None] = {}

    def append(run_id: str) -> None:
        try:
            gc.append(AppendRequest(_cp(run_id, 1)))
            errors[run_id] = None
        except BaseException as exc:
            errors[run_id] = exc

    leader = threading.Thread(target=append, args=("r0",))
    leader.start()
    assert store.entered.wait(30)
    followers = [threading.Thread(target=append, args=(f"r{i}",)) for i in range(1, 4)]
    for t in followers:
        t.start()
    deadline = time.monotonic() + 30
    while True:  # every follower queued (and asleep) behind the commit in progress
        with gc._cond:
            if len(gc._queue) == 3 and all(s.wakeup is not None for s in gc._queue):
                break
        assert time.monotonic() < deadline
        threading.Event().wait(0.001)
    store.gate.set()
    for t in [leader, *followers]:
        t.join(30)
        assert not t.is_alive()
    assert str(errors.pop("r0")) == "append_batch returned 0 results for 1 requests"
    followers_errors = [errors[f"r{i}"] for i in range(1, 4)]
    assert all(isinstance(e, StoreError) for e in followers_errors)
    assert len({id(e) for e in followers_errors}) == 1  # one failure, shared by the batch
    assert str(followers_errors[0]) == "append_batch returned 2 results for 3 requests"
    assert (gc.batches, gc.appends) == (2, 4)


class _Gated(InMemoryCheckpointStore):
    """Holds its first ``append_batch`` of each round until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.hold = True

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[BaseException | None]:
        if self.hold:
            self.hold = False
            self.entered.set()
            assert self.gate.wait(30)
        return super().append_batch(requests)


def test_a_lone_leader_hands_the_next_batch_to_the_caller_queued_behind_it():
    """A caller that commits alone (the common case: one run in flight) and
    finds a caller queued behind it when its commit ends wakes that caller,
    which commits its own request as the next batch; each round counts one
    wake-up, and every request is stored."""
    store = _Gated()
    for i in range(4):
        store.create_run(RunRecord(f"r{i}", "f", "v", "running", 0, 1.0, 1.0), _cp(f"r{i}", 0))
    gc = GroupCommitter(store)
    errors: dict[str, BaseException | None] = {}

    def append(run_id: str) -> None:
        try:
            gc.append(AppendRequest(_cp(run_id, 1)))
            errors[run_id] = None
        except BaseException as exc:
            errors[run_id] = exc

    for rnd, (lone, queued) in enumerate([("r0", "r1"), ("r2", "r3")], start=1):
        store.entered.clear()
        store.gate.clear()
        store.hold = True
        leader = threading.Thread(target=append, args=(lone,))
        leader.start()
        assert store.entered.wait(30)
        follower = threading.Thread(target=append, args=(queued,))
        follower.start()
        deadline = time.monotonic() + 30
        while True:  # the follower queued (and asleep) behind the lone commit
            with gc._cond:
                if len(gc._queue) == 1 and gc._queue[0].wakeup is not None:
                    break
            assert time.monotonic() < deadline
            threading.Event().wait(0.001)
        store.gate.set()
        for t in (leader, follower):
            t.join(30)
            assert not t.is_alive()
        assert errors == {**errors, lone: None, queued: None}
        assert (gc.batches, gc.appends, gc.wakeups) == (2 * rnd, 2 * rnd, rnd)
    assert [store.latest(f"r{i}").revision for i in range(4)] == [1, 1, 1, 1]
