"""A step costs what it changed: appending a checkpoint whose state keeps a
large field unchanged does not copy that field (real SQLite file, real
PostgreSQL server). The stores used to deep-copy the whole state and step map
on every append to keep a private cached copy; a long list in the state then
cost its size at every loop iteration (a 50,724-file digest went from 643 to
68 files/s)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.events import StepFinished
from desktop_app.store.records import Checkpoint, RunRecord

ITEMS = 200_000


class CallCounter:
    """Counts the Python function calls made in this thread while it is on:
    a measure of work that, unlike a timer, does not move with the
    machine's load."""

    def __init__(self) -> None:
        self.calls = 0

    def _profile(self, frame: object, event: str, arg: object) -> None:
        if event == "call":
            self.calls += 1

    def on(self) -> None:
        sys.setprofile(self._profile)

    def off(self) -> None:
        sys.setprofile(None)


def python_calls(fn: Callable[[], object]) -> int:
    counter = CallCounter()
    counter.on()
    try:
        fn()
    finally:
        counter.off()
    return counter.calls


@pytest.mark.parametrize("kind", ["sqlite", "pg"])
def test_an_append_costs_what_the_step_changed_not_the_state_it_kept(kind, request):
    store = request.getfixturevalue(f"{kind}_store")

    def appender(rid: str, items: list[str]) -> Callable[[], None]:
        store.create_run(
            RunRecord(rid, "f", "v1", "running", 0, 1000.0, 1000.0),
            Checkpoint(rid, 0, "running", {"items": items, "n": 0}, {}, ("walk",), 1000.0),
        )
        revision = 0

        def append() -> None:
            nonlocal revision
            revision += 1
            # as the driver's encoder passes it: the unchanged field is the same object
            state = {"items": items, "n": revision}
            store.append(
                Checkpoint(rid, revision, "running", state, {}, ("walk",), 1000.0 + revision)
            )

        return append

    big = [f"file-{i:06d}.txt" for i in range(ITEMS)]
    long_list, short_list = appender("run-long", big), appender("run-short", big[:10])
    for _ in range(3):  # caches warm, statements prepared
        long_list(), short_list()
    long_calls, short_calls = python_calls(long_list), python_calls(short_list)
    assert long_calls <= short_calls + 50, (
        f"an append next to an unchanged {ITEMS:,}-item list made {long_calls:,} Python "
        f"calls; next to a 10-item list {short_calls:,}"
    )
    latest = store.latest("run-long")
    assert (latest.revision, latest.state["n"], latest.state["items"]) == (4, 4, big)


class Counter(BaseModel):
    n: int = 0


def test_a_step_on_postgresql_costs_the_same_at_step_2500_as_at_step_10(pg_store):
    """Each step's append names the step record it changed, also when the
    engine appends without a group committer (PostgreSQL): the store used to
    compare every step record of the run at every step, so the 2,500th step
    of a run cost 3-4x its 10th. Measured in Python calls over ten steps
    early and ten steps late, on the thread that drives the run."""
    steps = 2_500
    b = FlowBuilder("long", Counter, max_steps=steps + 10)
    for i in range(steps):
        b.step(f"s{i}", lambda s: {"n": s.n + 1})
    engine = Engine(pg_store, flows=[b.chain().compile()])
    windows = {10: "early", 20: None, steps - 20: "late", steps - 10: None}
    counters = {"early": CallCounter(), "late": CallCounter()}
    finished = 0
    driver = threading.get_ident()

    def window(ev: object) -> None:
        nonlocal finished
        if not isinstance(ev, StepFinished) or threading.get_ident() != driver:
            return
        finished += 1
        if finished in windows:
            sys.setprofile(None)
            name = windows[finished]
            if name is not None:
                counters[name].on()

    engine.events.subscribe(window)
    try:
        assert engine.run("long", Counter()).state.n == steps
    finally:
        sys.setprofile(None)
    early, late = counters["early"].calls, counters["late"].calls
    assert early > 0 and late <= early * 1.1, (
        f"steps {steps - 19}-{steps - 10}: {late:,} Python calls; steps 11-20: {early:,}"
    )


@pytest.mark.parametrize(
    "values",
    [
        ("run", 3, "delta", None, 1733248000.123456, '{"n":1}', 'é\u2028\x7f\x1f"\\'),
        (0.0, -0.0, 1e-4, 9.99e15, 123456789.0, 2**63 - 1, -(2**63)),
        (7.8e-05, 1e16, 1.5e300, float("nan"), float("inf"), -float("inf")),  # exponents
        (2**64, "big integer"),
        (True, False, None, ""),
    ],
)
def test_a_row_checksum_is_the_standard_librarys_json_checksum(values):
    """Checksums of stored rows are BLAKE2b of the standard library's JSON of
    the values; the fast encoder takes the values it writes identically, the
    others fall back, so rows written before and after read back verified."""
    import hashlib
    import json

    from desktop_app.store.sqlite.store import row_checksum

    text = json.dumps(list(values), ensure_ascii=False, separators=(",", ":"))
    want = hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()
    assert row_checksum(values) == want


@pytest.mark.parametrize(
    "created_at", [1733248000.123456, 7.8e-05, 1e16, 1.5e300, 0.0, -2.5e-07, 1733248000, 0]
)
def test_a_checkpoint_row_stored_at_any_clock_reads_back_verified(created_at, db_path):
    """The append builds its row's checksum before the write transaction and
    checks only ``created_at`` for the floats orjson writes otherwise: rows
    stored at any clock value (a float with an exponent, zero) read back verified
    by a new store, whose read compares the standard library's checksum."""
    from desktop_app.store.rows import checkpoint_values
    from desktop_app.store.sqlite.store import checkpoint_checksum, open_store, row_checksum

    store = open_store(db_path)
    cp0 = Checkpoint("r", 0, "running", {"n": 0, "s": "é\u2028"}, {}, ("a",), created_at)
    store.create_run(RunRecord("r", "f", "v1", "running", 0, 1000.0, 1000.0), cp0)
    for rev in (1, 2):
        cp = Checkpoint("r", rev, "running", {"n": rev, "s": "é"}, {}, ("a", "b"), created_at)
        row = checkpoint_values(cp, cp0, error=None)
        assert checkpoint_checksum(row) == row_checksum(row)
        store.append(cp)
        cp0 = cp
    store.close()
    again = open_store(db_path)
    try:
        latest = again.latest("r")
        assert (latest.revision, latest.state, latest.created_at) == (
            2,
            {"n": 2, "s": "é"},
            created_at,
        )
        assert [c.revision for c in again.history("r")] == [0, 1, 2]
    finally:
        again.close()


class _Watched(list):
    """A list that counts the comparisons made with it (C-level ``==`` on a
    plain list makes no Python call a call counter could see)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _Watched.compared += 1
        return list.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize("kind", ["sqlite", "pg"])
def test_an_append_told_which_fields_changed_compares_no_other_field(kind, request):
    """A writer that names the fields it changed (the driver does) spares the
    store comparing the others with the previous revision's values: a
    200,000-item list kept unchanged used to be compared item by item at
    every step. The delta stored is the same: read back by a new store."""
    store = request.getfixturevalue(f"{kind}_store")
    big = [f"file-{i:06d}.txt" for i in range(ITEMS)]
    store.create_run(
        RunRecord("r", "f", "v1", "running", 0, 1000.0, 1000.0),
        Checkpoint("r", 0, "running", {"items": big, "n": 0}, {}, ("walk",), 1000.0),
    )
    watched = _Watched(big)
    _Watched.compared = 0
    store.append(
        Checkpoint("r", 1, "running", {"items": watched, "n": 1}, {}, ("walk",), 1001.0),
        changed_fields=frozenset({"n"}),
    )
    assert _Watched.compared == 0
    store.append(  # unnamed: the store compares every field, as before
        Checkpoint("r", 2, "running", {"items": watched, "n": 2}, {}, ("walk",), 1002.0)
    )
    assert _Watched.compared >= 1
    fresh = type(store)(store.conn) if kind == "sqlite" else store
    got = fresh.get_checkpoint("r", 1).state
    assert (got["n"], got["items"] == big) == (1, True)


@pytest.mark.parametrize("given", [False, True], ids=["plain", "given"])
def test_an_append_told_what_changed_compares_no_other_field_or_step_record(sqlite_store, given):
    """A writer that names the state fields and step records it changed
    (the driver does; ``AppendRequest.given`` is the engine's lean step
    path) spares the store comparing the others with the previous
    revision's: neither the kept 200,000-item list nor the kept step
    record is compared, and the row stored reads back the same from a new
    store."""
    from dataclasses import fields

    from desktop_app.store.group_commit import AppendRequest
    from desktop_app.store.records import StepRecord

    class WatchedStep(StepRecord):
        compared = 0

        def __eq__(self, other: object) -> bool:
            WatchedStep.compared += 1
            return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self))

        __hash__ = None  # type: ignore[assignment]

    store = sqlite_store
    big = [f"file-{i:06d}.txt" for i in range(ITEMS)]
    done = StepRecord("walk", "completed", attempts=1, started_at=1000.0)
    store.create_run(
        RunRecord("r", "f", "v1", "running", 0, 1000.0, 1000.0),
        Checkpoint("r", 0, "running", {"items": big, "n": 0}, {"walk": done}, ("next",), 1000.0),
    )
    kept = WatchedStep(*(getattr(done, f.name) for f in fields(done)))
    watched = _Watched(big)
    _Watched.compared = WatchedStep.compared = 0
    cp = Checkpoint(
        "r", 1, "running", {"items": watched, "n": 1}, {"walk": kept}, ("next",), 1001.0
    )
    told = {"changed_steps": frozenset(), "changed_fields": frozenset({"n"})}
    if given:
        (err,) = store.append_batch([AppendRequest(cp, given=True, **told)])
        assert err is None
    else:
        store.append(cp, **told)
    assert (_Watched.compared, WatchedStep.compared) == (0, 0)
    got = type(store)(store.conn).get_checkpoint("r", 1)
    assert (got.state["n"], got.state["items"] == big, got.steps) == (1, True, {"walk": done})


def test_the_driver_names_the_state_fields_a_step_changed():
    """What the driver tells the store at each step: the fields the step
    returned (``n``), never the 30,000-item list it kept; every field only
    in the first checkpoint after the driver loaded the run (one comparison
    per run or resume, not per step)."""
    from collections.abc import Sequence

    from desktop_app.store.group_commit import AppendRequest
    from desktop_app.store.memory.store import InMemoryCheckpointStore

    class Listing(BaseModel):
        items: list[str] = []
        n: int = 0

    seen: list[frozenset[str] | None] = []

    class Recording(InMemoryCheckpointStore):
        def append_batch(self, requests: Sequence[AppendRequest]) -> list[BaseException | None]:
            # a run's creation rides in a batch too (``run`` set): its whole state
            seen.extend(r.changed_fields for r in requests if r.run is None)
            return super().append_batch(requests)

    b = FlowBuilder("walk", Listing)
    for i in range(3):
        b.step(f"s{i}", lambda s: {"n": s.n + 1})
    engine = Engine(Recording(), flows=[b.chain().compile()])
    result = engine.run("walk", Listing(items=[f"f{i}" for i in range(30_000)]))
    assert result.state.n == 3
    assert seen == [frozenset({"items", "n"}), frozenset({"n"}), frozenset({"n"})]


class WholeSecondsClock:
    """A program's own clock that returns whole seconds as ``int`` (the
    ``Clock`` protocol says float; ``int(time.time())`` is a common way to
    write one)."""

    def __init__(self, start: int) -> None:
        self.at = start

    def now(self) -> int:
        return self.at

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        self.at += int(seconds)
        return True


def test_a_run_on_a_clock_of_whole_seconds_reads_back_verified(db_path):
    """Checkpoints stamped by a clock returning ``int`` are stored in a REAL
    column and read back as floats: their checksum was computed over the
    ``int`` and every later read of the run said its checkpoint was corrupt
    (``CheckpointCorruptError``). A new process reads the run, its history and
    its state."""
    from desktop_app.store.sqlite.store import open_store

    class S(BaseModel):
        n: int = 0

    b = FlowBuilder("whole_seconds", S, version="1")
    b.step("one", lambda s: {"n": s.n + 1})
    b.step("two", lambda s: {"n": s.n + 10})
    store = open_store(db_path)
    engine = Engine(store, flows=[b.chain().compile()], clock=WholeSecondsClock(1_767_225_600))
    run_id = engine.run("whole_seconds", S()).run_id
    store.close()
    again = open_store(db_path)
    try:
        latest = again.latest(run_id)
        assert (latest.status, latest.state["n"], latest.created_at) == (
            "completed",
            11,
            1_767_225_600.0,
        )
        assert [c.revision for c in again.history(run_id)] == list(range(latest.revision + 1))
    finally:
        again.close()


def test_a_state_model_with_its_own_model_dump_is_stored_as_it_dumps(db_path):
    """The step path dumps a state through its model's serializer directly
    (pydantic's ``model_dump`` is a Python wrapper of ~1 us a step), but a
    model that overrides ``model_dump`` is still dumped through it: the
    stored revision 0, every delta and the state a new process reads back
    are what the override gives; a model keeping pydantic's is stored as
    ``model_dump(mode="json")`` gives it."""
    from desktop_app.store.sqlite.store import open_store

    class Masked(BaseModel):
        n: int = 0
        note: str = "plain"

        def model_dump(self, **kwargs):  # type: ignore[no-untyped-def, override]
            out = super().model_dump(**kwargs)
            if "note" in out:
                out["note"] = out["note"].upper()
            return out

    class Plain(BaseModel):
        n: int = 0
        note: str = "plain"

    for model in (Masked, Plain):
        b = FlowBuilder(f"dump_{model.__name__}", model, version="1")
        b.step("one", lambda s: {"n": s.n + 1})
        b.step("two", lambda s: {"note": "changed"})
        store = open_store(db_path)
        engine = Engine(store, flows=[b.chain().compile()])
        run_id = engine.run(f"dump_{model.__name__}", model()).run_id
        history = [store.get_checkpoint(run_id, rev).state for rev in range(3)]
        store.close()
        again = open_store(db_path)
        try:
            latest = again.latest(run_id).state
        finally:
            again.close()
        if model is Masked:
            assert [h["note"] for h in history] == ["PLAIN", "PLAIN", "CHANGED"]
            assert latest == {"n": 1, "note": "CHANGED"}
        else:
            assert [h["note"] for h in history] == ["plain", "plain", "changed"]
            assert latest == {"n": 1, "note": "changed"}
        assert [h["n"] for h in history] == [0, 1, 1]


def test_step_records_copy_only_their_top_level_and_read_back_as_one_dict():
    """A run with 5,000 distinct step ids (a loop naming a step per item):
    every snapshot reads back as the dict of every record written so far
    (newest value, first-written order), an earlier snapshot does not
    change when later steps are written, the shared levels stay few
    (merged like a binary counter: each record copied O(log n) times, not
    the whole map every 64 steps, which made a step's cost grow with the
    run), and a driver starting from a stored snapshot shares its levels."""
    from desktop_app.flow.state import StepRecords
    from desktop_app.store.records import StepRecord

    records = StepRecords({})
    expected: dict[str, StepRecord] = {}
    kept = []
    for i in range(5_000):
        rec = StepRecord(f"s{i}", "completed", attempts=1, finished_at=float(i))
        records[f"s{i}"] = expected[f"s{i}"] = rec
        if i % 7 == 0:  # a record written again: newest value, first position
            again = StepRecord("s0", "completed", attempts=i + 1)
            records["s0"] = expected["s0"] = again
        snap, changed = records.snapshot()
        records.stored(changed)
        if i % 997 == 0:
            kept.append((snap, dict(expected)))
        assert len(records._levels) <= 8
    assert list(snap) == list(expected) and dict(snap) == expected and len(snap) == 5_000
    for old, then in kept:  # a checkpoint's map never moves under it
        assert dict(old) == then and list(old) == list(then)
    again = StepRecords(snap)
    assert all(a is b for a, b in zip(again._levels, snap._levels, strict=False))
    assert dict(again) == expected
