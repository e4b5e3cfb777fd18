"""A flow's ``on_cancel`` option (``FlowBuilder(on_cancel=...)``, kept on
the compiled flow): ``Engine.cancel`` calls it once the canceled run's
intents were withdrawn, with what was withdrawn. The hook travels with the
flow, so several engines in one process, each with its own flow of one name
and its own hook (or none), each record their own cancels; a process-wide
registry keyed by flow name gave every engine the hook registered last. An
engine without the run's flow still cancels it and says that no hook ran.
Real SQLite files and real PostgreSQL databases."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.flow import CompiledFlow, Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.definition import CancelHook
from desktop_app.store.protocol import CheckpointStore, Withdrawal


class Note(BaseModel):
    sent: int = 0


def queue(state: Note, ctx: Any) -> dict[str, int]:
    ctx.send("mail", {"to": "a@example.org"})
    return {"sent": 1}


def wait(state: Note, ctx: Any) -> dict[str, int]:
    ctx.interrupt("send it?")
    return {}


def mailer(hook: CancelHook | None) -> CompiledFlow[Note]:
    """Flow ``mailer``: queues one mail (an outbox intent), then waits, so
    a run of it is canceled with its intent queued."""
    return (
        FlowBuilder("mailer", Note, on_cancel=hook)
        .step("queue", queue)
        .step("wait", wait)
        .chain()
        .compile()
    )


def note(tag: str) -> CancelHook:
    """A hook recording ``(tag, run_id, intents withdrawn)`` in table ``notes``."""

    def hook(store: CheckpointStore, run_id: str, done: Withdrawal) -> None:
        store.write(
            lambda tx: tx.execute(
                "INSERT INTO notes VALUES (?, ?, ?)", (tag, run_id, len(done.withdrawn))
            )
        )

    return hook


def notes_of(store: CheckpointStore) -> set[tuple[str, str, int]]:
    rows = store.query(lambda tx: tx.execute("SELECT tag, run_id, withdrawn FROM notes").fetchall())
    return {(str(t), str(r), int(n)) for t, r, n in rows}


@pytest.fixture(params=["sqlite_store", "pg_store"])
def store(request: pytest.FixtureRequest) -> CheckpointStore:
    s: CheckpointStore = request.getfixturevalue(request.param)
    s.write(lambda tx: tx.execute("CREATE TABLE notes (tag TEXT, run_id TEXT, withdrawn INTEGER)"))
    return s


def test_the_flows_hook_records_the_cancel_with_what_was_withdrawn(store):
    flow = mailer(note("mailer"))
    assert flow.on_cancel is not None
    engine = Engine(store, flows=[flow], clock=ManualClock())
    rid = engine.run(flow, Note()).run_id
    assert store.undelivered_intents() == {rid: 1}
    done = engine.cancel_withdrawing(rid)
    assert done.run.status == "canceled" and len(done.withdrawn) == 1
    assert notes_of(store) == {("mailer", rid, 1)}


def test_several_engines_with_a_flow_of_one_name_each_keep_their_own_hook(store):
    """Three engines in one process over one store, each with its own flow
    ``mailer``: two with their own hook, one with none. Each cancel runs the
    hook of the canceling engine's flow only; building a later flow of the
    name neither replaces an earlier one's hook nor lends it to one
    without."""
    flows = [mailer(note("first")), mailer(note("second")), mailer(None)]
    assert len({f.version for f in flows}) == 1  # the hook is not part of the version
    engines = [Engine(store, flows=[f], clock=ManualClock()) for f in flows]
    rids = [e.run("mailer", Note()).run_id for e in engines]
    for e, rid in zip(engines, rids, strict=True):
        assert e.cancel(rid).status == "canceled"
    assert store.undelivered_intents() == {}
    assert notes_of(store) == {("first", rids[0], 1), ("second", rids[1], 1)}


def test_an_engine_without_the_runs_flow_cancels_it_and_says_no_hook_ran(store, caplog):
    flow = mailer(note("mailer"))
    rid = Engine(store, flows=[flow], clock=ManualClock()).run(flow, Note()).run_id
    other = FlowBuilder("other", Note).step("queue", queue).chain().compile()
    stranger = Engine(store, flows=[other], clock=ManualClock())
    with caplog.at_level(logging.WARNING, logger="desktop_app.flow.engine"):
        done = stranger.cancel_withdrawing(rid)
    assert done.run.status == "canceled" and len(done.withdrawn) == 1
    assert notes_of(store) == set()
    assert (
        f"run {rid} of flow 'mailer' was canceled by an engine with no flow of that name: "
        "the flow's on_cancel hook, if it has one, did not run"
    ) in caplog.messages


def test_a_run_of_a_mode_of_the_flow_gets_that_modes_hook(store):
    """A run recorded under another mode of ``mailer`` (``register_variant``)
    that this engine built to drive it: the cancel runs that mode's hook,
    not the registered flow's."""

    def mode(hook: CancelHook) -> CompiledFlow[Note]:
        return (
            FlowBuilder("mailer", Note, on_cancel=hook)
            .step("queue", queue)
            .step("wait", wait)
            .step("after", lambda s: {})
            .chain()
            .compile()
        )

    variant = mode(note("mode"))
    rid = Engine(store, flows=[variant], clock=ManualClock()).run(variant, Note()).run_id
    engine = Engine(store, flows=[mailer(note("registered"))], clock=ManualClock())
    engine.register_variant("mailer", variant.version, lambda: mode(note("mode")))
    assert engine.flow_of("mailer", variant.version) is not engine.flow("mailer")  # built here
    assert engine.cancel(rid).status == "canceled"
    assert notes_of(store) == {("mode", rid, 1)}
