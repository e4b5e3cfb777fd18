"""A send (or a lookup) that meets a failing store ends the dispatcher's pass.

On a nearly full disk a tidy move was made and the record of it failed
(``DiskFullError``); the dispatcher let the intent go as "outcome unknown"
and went on to the next intent, whose own write found room again, and so
on: a later record failed too, and ``resume`` said "2 moves may have been
made", two effects made whose end was never recorded. The store cannot
record an outcome now, so the pass ends at the first such error: one intent
may have been made (it was), every other is still ``pending`` (merely
claimed: never counted as begun), and the next pass looks the first up and
makes the rest once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.errors import DiskFullError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.outbox import LOOKUP_FAILED, SEND_FAILED, Dispatcher
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store


class Batch(BaseModel):
    n: int = 3
    keys: list[str] = []


def queue_three(store: SqliteCheckpointStore) -> tuple[str, list[str]]:
    """A completed run whose one step queued three intents to ``files``."""

    def queue(s: Batch, ctx) -> dict:
        return {"keys": [ctx.send("files", {"i": i}) for i in range(s.n)]}

    flow = FlowBuilder("batch", Batch).step("queue", queue).compile()
    engine = Engine(store, flows=[flow])
    result = engine.run("batch", Batch())
    assert result.status == "completed"
    return result.run_id, list(engine.get(result.run_id).keys)


class Files:
    """A destination that makes each effect (``made``) and then records it in
    the store; ``full`` makes that record fail as on a full disk."""

    def __init__(self, *, full: bool = False, lookup_full: bool = False) -> None:
        self.made: list[str] = []
        self.full = full
        self.lookup_full = lookup_full

    def send(self, key: str, payload: object) -> dict:
        self.made.append(key)  # the effect happens first
        if self.full:  # its record does not (a store that needs 8 MiB to go on)
            raise DiskFullError("the database", 8 * 2**20)
        return {"made": key}

    def lookup(self, key: str) -> dict | None:
        if self.lookup_full:
            raise DiskFullError("the database")
        return {"made": key} if key in self.made else None


def statuses(store: SqliteCheckpointStore) -> dict[str, str]:
    return {i.intent_id: i.status for i in store.intents(["pending", "sending", "delivered"])}


def test_a_send_that_meets_a_full_disk_ends_the_pass(db_path: Path) -> None:
    store = open_store(db_path)
    try:
        run_id, keys = queue_three(store)
        files = Files(full=True)
        outbox = Dispatcher(store, {"files": files})  # one, as the app's delivery keeps
        with pytest.raises(DiskFullError) as full:
            outbox.dispatch()
        # its words are a delivery's, not a run's (no run stopped: a tryout)
        said = str(full.value)
        assert "stopped at its last saved step" not in said and "resume" not in said, said
        assert "the next delivery pass (a program's next dispatch()" in said, said
        assert said.startswith("the disk holding the database is full"), said
        assert "nothing saved before is lost" in said and "Free at least 8 MiB" in said, said
        assert files.made == [keys[0]]  # no further effect once a record failed
        assert statuses(store) == {keys[0]: "sending", keys[1]: "pending", keys[2]: "pending"}
        (first,) = store.intents(["sending"])
        assert first.last_error is not None and first.last_error.startswith(SEND_FAILED)
        # what `show` and `resume` count as "may have been made": the one that began
        assert store.sending_intents() == {run_id: 1}
        # space freed: the next pass looks the first up (made) and makes the rest once
        files.full = False
        assert outbox.dispatch() == 3
        assert files.made == keys
        assert set(statuses(store).values()) == {"delivered"}
    finally:
        store.close()


def test_a_lookup_that_meets_a_full_disk_ends_the_pass(db_path: Path) -> None:
    store = open_store(db_path)
    try:
        run_id, keys = queue_three(store)
        files = Files(full=True)
        outbox = Dispatcher(store, {"files": files})  # one, as the app's delivery keeps
        with pytest.raises(DiskFullError):
            outbox.dispatch()
        files.full, files.lookup_full = False, True
        with pytest.raises(DiskFullError):  # the interrupted one cannot be looked up
            outbox.dispatch()
        assert files.made == [keys[0]]  # and nothing after it was sent
        (first,) = store.intents(["sending"])
        assert first.last_error is not None and first.last_error.startswith(LOOKUP_FAILED)
        assert store.sending_intents() == {run_id: 1}
        files.lookup_full = False
        assert outbox.dispatch() == 3
        assert files.made == keys
    finally:
        store.close()


def test_a_claim_that_meets_a_full_disk_says_what_a_delivery_needs(db_path: Path) -> None:
    """The claim of a pass met the full disk before any send (a tryout, with
    40 KB free): its message was a run's ("the run stopped ... flowdesk
    resume --all"); it is a delivery's, and nothing was claimed or sent."""

    class FullAtClaim(SqliteCheckpointStore):
        def claim_intents(self, *args: object, **kwargs: object) -> list:  # type: ignore[override]
            raise DiskFullError("the database")

    store = open_store(db_path)
    try:
        queue_three(store)
    finally:
        store.close()
    store = open_store(db_path)
    store.__class__ = FullAtClaim
    files = Files()
    try:
        with pytest.raises(DiskFullError) as full:
            Dispatcher(store, {"files": files}).dispatch()
        said = str(full.value)
        assert "stopped at its last saved step" not in said and "resume" not in said, said
        assert "the next delivery pass (a program's next dispatch()" in said, said
        assert files.made == [] and set(statuses(store).values()) == {"pending"}
    finally:
        store.close()
