"""Outbox: intents commit with their checkpoint, are delivered after commit,
and a crash after the destination accepted is reconciled, not re-sent (S32)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.outbox import Dispatcher
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.outbox_worker import Order

HERE = Path(__file__).resolve().parent


@pytest.fixture
def destination(tmp_path):
    portfile = tmp_path / "port"
    proc = cli_forkserver.popen([sys.executable, str(HERE / "outbox_server.py"), str(portfile)])
    deadline = time.monotonic() + 10
    while not portfile.exists() or not portfile.read_text():
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{portfile.read_text()}"
    proc.kill()
    proc.wait()


def count(url: str, key: str) -> dict:
    with urllib.request.urlopen(f"{url}/count/{key}") as resp:
        return json.loads(resp.read())


@pytest.mark.scenario("S32")
def test_kill_after_accept_before_ack_reconciles_instead_of_resending(db_path, destination):
    worker = [sys.executable, str(HERE / "outbox_worker.py"), str(db_path), destination]
    r = subprocess.run([*worker, "--kill-after-send"], capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr
    store = open_store(db_path)
    (intent,) = store.intents(["sending"])
    (run,) = store.list_runs()
    assert run.status == "completed"  # the intent committed with the step
    store.close()
    assert count(destination, intent.intent_id) == {"posts": 1, "ops": 1}
    r = subprocess.run(worker, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "delivered 1" in r.stdout
    assert count(destination, intent.intent_id) == {"posts": 1, "ops": 1}  # not re-sent
    store = open_store(db_path)
    (done,) = store.intents(["delivered"])
    assert done.intent_id == intent.intent_id == f"{run.run_id}:charge:0:0"
    assert done.receipt["payload"] == {"amount": 42} and done.attempts == 1
    store.close()


def test_intent_commits_only_with_its_step_and_is_delivered_once(db_path):
    calls: list[tuple[str, object]] = []

    class Memory:
        def send(self, key, payload):
            calls.append((key, payload))
            return {"ok": True}

        def lookup(self, key):
            return None

    class Boom(BaseException):
        pass

    crash = {"on": True}

    def charge(s: Order, ctx) -> dict:
        key = ctx.send("payments", {"amount": s.amount})
        if crash["on"]:
            crash["on"] = False
            raise Boom()  # dies before the step's checkpoint: the intent never existed
        return {"charge_key": key}

    flow = FlowBuilder("pay", Order).step("charge", charge).compile()
    store = open_store(db_path)
    engine = Engine(store, flows=[flow])
    with pytest.raises(Boom):
        engine.run("pay", Order(amount=5))
    assert store.intents(["pending", "sending", "delivered"]) == []
    engine.recover()
    dispatcher = Dispatcher(store, {"payments": Memory()})
    assert dispatcher.dispatch() == 1
    assert dispatcher.dispatch() == 0
    (run,) = store.list_runs()
    assert calls == [(engine.get(run.run_id).charge_key, {"amount": 5})]
    store.close()
