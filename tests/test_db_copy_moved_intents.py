"""``db copy`` and the side effects still queued in the file (a team
tryout): a completed run's outbox intent not delivered yet was copied to
PostgreSQL *and* left claimable in the file, so a dispatcher on each side
delivered it: one effect made twice, nothing said. The copy now marks every
intent not delivered as moved in the file, in the transaction that marks the
runs: no dispatcher of the file takes it, the server's deliver it once; a
second copy of the file is refused naming it."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from desktop_app.errors import CopySourceMovedError
from desktop_app.flow import Engine
from desktop_app.flow.outbox import Dispatcher
from desktop_app.store.postgres.copy import copy_sqlite_to_postgres
from desktop_app.store.postgres.store import open_postgres_store
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import as_printed, flowdesk
from tests.damaged_flows import Order, sender
from tests.test_db_copy_live_runs import _pg_clear

pytestmark = pytest.mark.postgres


class Mailbox:
    """A send-only destination recording each key it was sent, per side."""

    def __init__(self, log: list[tuple[str, str]], side: str) -> None:
        self.log, self.side = log, side

    def send(self, idempotency_key: str, payload: Any) -> Any:
        self.log.append((self.side, idempotency_key))
        return {"ok": True}


@pytest.mark.scenario("S116")
def test_a_queued_side_effect_is_delivered_once_after_db_copy_by_the_server_only(
    db_path: Path, pg_url: str
) -> None:
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[sender])
        done = engine.run("sender", Order(order="done")).run_id  # queues a mail, waits
        assert engine.resume_with(done, "yes").status == "completed"
        waiting = engine.run("sender", Order(order="waiting")).run_id
        assert len(store.open_intents(done)) == 1 and len(store.open_intents(waiting)) == 1
    finally:
        store.close()

    out = flowdesk(db_path, "db", "copy", "--from", str(db_path), "--to", pg_url)
    assert out.returncode == 0, out.stderr
    assert (
        f"marked 2 queued side effects (outbox intents not delivered yet) moved in {db_path}: "
        "no dispatcher on it sends them; a dispatcher of"
    ) in out.stdout, out.stdout

    # the file's show says where the effect went, not "queued" with a
    # dispatcher to run here; its command, run as printed, shows it there
    shown = flowdesk(db_path, "show", done)
    assert shown.returncode == 0, shown.stderr
    first = shown.stdout.splitlines()[0]
    assert first.endswith("status completed"), first  # nothing "queued (not made yet)" here
    [line] = [ln for ln in shown.stdout.splitlines() if "by flowdesk db copy" in ln]
    assert line.startswith("its 1 side effect not delivered was moved to postgresql://"), line
    assert (
        "a dispatcher there delivers it (a worker for the built-in destinations, your "
        "program's for its own), nothing on this database does; see it there: "
    ) in line
    assert "Dispatcher(" not in shown.stdout
    there = as_printed(line.rsplit("see it there: ", 1)[1], env=dict(os.environ))
    assert there.returncode == 0, there.stderr
    assert "status completed · 1 side effect queued (not made yet)" in there.stdout, there.stdout
    doc = json.loads(flowdesk(db_path, "show", done, "-o", "json").stdout)
    assert list(doc["side_effects_moved"].values()) == [1] and doc["undelivered"] == 0
    listed = [json.loads(x) for x in flowdesk(db_path, "runs", "-o", "jsonl").stdout.splitlines()]
    assert [r["undelivered"] for r in listed if r["run_id"] == done] == [0]  # none queued here
    # the app's Outbox tab on the file says the same (it listed it "pending")
    asyncio.run(_outbox_tab_says_moved(db_path, done))

    sent: list[tuple[str, str]] = []
    store = open_store(db_path)
    try:  # the laptop's dispatcher (the app, `flowdesk agent`, a program's own)
        assert Dispatcher(store, {"mail": Mailbox(sent, "file")}).dispatch() == 0
    finally:
        store.close()
    pg = open_postgres_store(pg_url)
    try:
        assert Dispatcher(pg, {"mail": Mailbox(sent, "postgres")}).dispatch() == 2
        assert Dispatcher(pg, {"mail": Mailbox(sent, "postgres")}).dispatch() == 0
    finally:
        pg.close()
    assert sorted(side for side, _key in sent) == ["postgres", "postgres"]
    assert len({key for _side, key in sent}) == 2  # each effect once

    _pg_clear(pg_url)  # an empty target again: the file's intents must not go twice
    with pytest.raises(CopySourceMovedError) as again:
        copy_sqlite_to_postgres(db_path, pg_url)
    said = str(again.value)
    for run in (done, waiting):
        assert f"outbox intent {run}:queue:0:0 (run {run}): moved to postgresql" in said, said


async def _outbox_tab_says_moved(db_path: Path, run_id: str) -> None:
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.app.widgets.run_tables import OutboxTable
    from desktop_app.config import load_settings
    from tests.app_support import settle
    from tests.test_app_detail import open_detail

    app = FlowdeskApp(load_settings(db_path=db_path), flows=[sender])
    async with app.run_test(size=(140, 44)) as pilot:
        screen = await open_detail(pilot, run_id)
        await pilot.press("5")  # the Outbox tab
        await settle(pilot)
        table = screen.query_one(OutboxTable)
        [intent] = table.intents
        where = intent.moved_to
        assert where is not None and where.startswith("postgresql://"), intent
        assert table.status_of(intent.intent_id) == f"moved to {where}"
        title = str(screen.query_one("#outbox-title").render())
        assert title == f"0 of 1 delivered here · 1 moved to {where} by db copy: delivered there"


def test_a_side_effect_a_live_dispatcher_of_the_file_has_claimed_makes_the_copy_refuse(
    db_path: Path, pg_url: str
) -> None:
    """A dispatcher of the file that claimed an intent (its send about to
    begin) would send it after the copy marked it moved: the copy refuses,
    naming it, and copies nothing, as for one it is sending."""
    from desktop_app.errors import CopySourceBusyError
    from desktop_app.flow.owners import new_owner

    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[sender])
        run = engine.run("sender", Order(order="o")).run_id
        (claimed,) = store.claim_intents(new_owner(), 60.0, 1)  # this live process
        assert claimed.run_id == run and claimed.status == "pending"
    finally:
        store.close()
    with pytest.raises(CopySourceBusyError) as busy:
        copy_sqlite_to_postgres(db_path, pg_url)
    assert f"run {run} (flow sender, scope default)" in str(busy.value)
    assert "sending its side effects" in str(busy.value)
    pg = open_postgres_store(pg_url)
    try:
        assert pg.list_runs() == []  # nothing copied
    finally:
        pg.close()
