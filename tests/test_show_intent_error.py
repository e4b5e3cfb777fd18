"""A new user's report: a program's destination whose send raised
(``ValueError('400')``) left its intent "may have been made" and `show`
never said what the destination said. `show` names each intent not
delivered whose try raised, with its tries and its last error. Real SQLite
file: the run started by `flowdesk`, the send by the program's dispatcher."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from desktop_app.flow.outbox import Dispatcher
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import flowdesk
from tests.damaged_flows import SENDER_ENV

ENV = {"FLOWDESK_FLOWS": SENDER_ENV}


class Refusing:
    """A destination whose API refuses the request."""

    def send(self, idempotency_key: str, payload: Any) -> Any:
        raise ValueError("400 Bad Request: unknown order")


def test_show_names_the_error_a_destination_raised(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    assert flowdesk(db, "db", "apply", env=ENV).returncode == 0
    out = flowdesk(db, "start", "sender", "--input", json.dumps({"order": "A"}), env=ENV)
    assert out.returncode == 0, out.stderr
    run = out.stdout.splitlines()[0]
    store = open_store(db)
    try:
        assert Dispatcher(store, {"mail": Refusing()}).dispatch() == 0
    finally:
        store.close()
    shown = flowdesk(db, "show", run, env=ENV)
    assert shown.returncode == 0, shown.stderr
    (line,) = [x for x in shown.stdout.splitlines() if x.startswith("  side effect ")]
    assert line.startswith(f"  side effect {run}:queue:0:0 to 'mail', 1 try: last error "), line
    assert "ValueError: 400 Bad Request: unknown order" in line, line
