"""Races between two real processes on one SQLite file: both are started,
both report ``ready``, then one file lets them go at once."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.contract.test_races import cp, run_record

WORKER = Path(__file__).resolve().parent / "race_worker.py"


def race(tmp_path: Path, name: str, *argsets: list[str]) -> list[str]:
    """Start one worker per argument list, release them together, return outputs."""
    go = tmp_path / f"{name}.go"
    procs = [
        cli_forkserver.popen(
            [sys.executable, str(WORKER), args[0], args[1], str(go), *args[2:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in argsets
    ]
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line == "ready\n", p.stderr.read() if p.stderr else line
    go.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


@pytest.mark.scenario("S7")
def test_two_processes_append_the_same_revision_exactly_one_wins(db_path, tmp_path):
    store = open_store(db_path)
    for i in range(3):  # a few rounds: each ordering is the database's choice
        rid = f"r{i}"
        store.create_run(run_record(rid), cp(rid, 0, {"x": 0}))
        outs = race(
            tmp_path,
            rid,
            ["append", str(db_path), rid, "1"],
            ["append", str(db_path), rid, "2"],
        )
        assert sorted(outs) == ["conflict", "ok"], outs
        winner = 1 + outs.index("ok")
        assert store.latest(rid).state == {"x": winner}
        assert [h.revision for h in store.history(rid)] == [0, 1]
    store.close()


class Order(BaseModel):
    n: int = 0


@pytest.mark.scenario("S43")
def test_two_dispatcher_processes_deliver_every_intent_and_send_each_once(db_path, tmp_path):
    def charge(s: Order, ctx) -> dict:
        ctx.send("sink", {"n": s.n})
        return {}

    flow = FlowBuilder("pay", Order).step("charge", charge).compile()
    store = open_store(db_path)
    engine = Engine(store, flows=[flow])
    for i in range(20):
        assert engine.run("pay", Order(n=i)).status == "completed"
    keys = {i.intent_id for i in store.intents(["pending"])}
    assert len(keys) == 20
    sink = tmp_path / "sink"
    outs = race(
        tmp_path,
        "dispatch",
        ["dispatch", str(db_path), str(sink)],
        ["dispatch", str(db_path), str(sink)],
    )
    delivered = [int(o.split()[-1]) for o in outs]
    assert store.intents(["pending", "sending", "failed"]) == []
    assert {i.intent_id for i in store.intents(["delivered"])} == keys
    sent = Counter(sink.read_text().split())
    assert set(sent) == keys
    assert [k for k, c in sent.items() if c != 1] == []  # no intent sent twice
    assert sum(delivered) == 20
    store.close()
