"""A user's own outbox destination, delivered by the user's own program,
while ``flowdesk resume``, ``answer`` and ``agent`` run on the same file:
their dispatchers know only the built-in destinations, so they leave the
user's intents pending (they failed them for good: the side effect was
never made and the run still read ``completed``), ``show`` says the effect
is queued, and the user's dispatcher makes it once.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.cli_support import flowdesk, serving, spawn

FLOW = """
from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Note(BaseModel):
    text: str


def queue(state, ctx):
    ctx.send("file", {"text": state.text})
    return {}


noted = FlowBuilder("noted", Note, version="1").step("queue", queue).compile()


class FileDestination:
    def __init__(self, path):
        self.path = Path(path)

    def send(self, key, payload):
        with self.path.open("a") as out:
            out.write(key + " " + payload["text"] + "\\n")
        return {"written": key}

    def lookup(self, key):
        if not self.path.exists():
            return None
        lines = self.path.read_text().splitlines()
        return {"written": key} if any(line.startswith(key + " ") for line in lines) else None
"""


def test_flowdesk_commands_leave_a_users_own_destination_to_the_users_program(
    tmp_path: Path,
) -> None:
    import sys

    from desktop_app.flow import Engine
    from desktop_app.flow.outbox import Dispatcher
    from desktop_app.store.sqlite.store import open_store

    code = tmp_path / "code"
    code.mkdir()
    (code / "noted_flows.py").write_text(FLOW)
    env = {
        "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")]),
        "FLOWDESK_FLOWS": '["noted_flows:noted"]',
    }
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    sys.path.insert(0, str(code))
    try:
        import noted_flows  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(code))
    # the user's program runs the flow; its dispatcher is not running yet
    store = open_store(db)
    run_id = Engine(store, flows=[noted_flows.noted]).run("noted", {"text": "hello"}).run_id
    store.close()

    # the CLI's and the agent's dispatchers pass over the user's destination
    assert flowdesk(db, "resume", "--all", env=env).returncode == 0
    agent = spawn("--db", str(db), "agent", "--poll", "0.1", env=env)
    serving(agent)  # a start-up slowed by load must not meet SIGTERM's default action
    time.sleep(1.5)  # some passes of its dispatcher (not a timing assertion)
    agent.send_signal(signal.SIGTERM)
    agent.communicate(timeout=60)
    assert agent.returncode == 0
    shown = flowdesk(db, "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "1 side effect queued" in shown.stdout, shown.stdout

    # the user's dispatcher makes it, once
    out = tmp_path / "notes.txt"
    store = open_store(db)
    try:
        sink = noted_flows.FileDestination(out)
        assert Dispatcher(store, {"file": sink}).dispatch() == 1
        assert Dispatcher(store, {"file": sink}).dispatch() == 0
        (done,) = store.intents(["delivered", "failed", "pending"])
        assert done.status == "delivered"
    finally:
        store.close()
    assert [line.split(" ", 1)[1] for line in out.read_text().splitlines()] == ["hello"]
    shown = flowdesk(db, "show", run_id, env=env)
    assert "queued" not in shown.stdout, shown.stdout
