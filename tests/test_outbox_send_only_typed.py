"""A user's typed destination with ``send`` only type-checks and delivers.

The engine supports destinations without a ``lookup`` (an interrupted send
to one is sent again under the same idempotency key, with a warning:
``outbox.resent_unchecked``), but ``outbox.Destination`` declared
``lookup``, so ``Dispatcher(store, {"mail": Mailer()})`` with a send-only
``Mailer`` failed ``mypy --strict``. A user's own module, checked by a
real ``mypy`` process and run as a real program on a real SQLite file.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests import cli_forkserver
from tests.cli_support import REPO

USER_MODULE = '''
"""A user's program: a flow that sends one mail, a send-only destination."""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.outbox import Destination, Dispatcher, LookupDestination
from desktop_app.flow.context import StepContext
from desktop_app.store.sqlite.store import open_store


class Note(BaseModel):
    sent: int = 0


class Mailer:
    """Sends mail; cannot say whether a key was sent before."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, idempotency_key: str, payload: Any) -> dict[str, str]:
        self.sent.append(idempotency_key)
        return {"queued": idempotency_key}


class Archive:
    """Keeps every receipt: it can say what it made."""

    def __init__(self) -> None:
        self.made: dict[str, dict[str, str]] = {}

    def send(self, idempotency_key: str, payload: Any) -> dict[str, str]:
        self.made[idempotency_key] = {"kept": idempotency_key}
        return self.made[idempotency_key]

    def lookup(self, idempotency_key: str) -> dict[str, str] | None:
        return self.made.get(idempotency_key)


def queue(state: Note, ctx: StepContext) -> dict[str, int]:
    ctx.send("mail", {"to": "a@example.org"})
    ctx.send("archive", {"note": 1})
    return {"sent": 1}


def main(db: str) -> int:
    store = open_store(db)
    flow = FlowBuilder("mailer", Note).step("queue", queue).compile()
    Engine(store, flows=[flow]).run(flow, {})
    mailer, archive = Mailer(), Archive()
    plain: Destination = mailer
    checked: LookupDestination = archive
    destinations: dict[str, Destination] = {"mail": plain, "archive": checked}
    delivered = Dispatcher(store, destinations).dispatch()
    print(delivered, len(mailer.sent), len(archive.made))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
'''


@pytest.mark.slow
def test_a_send_only_destination_passes_mypy_strict_and_delivers_once(tmp_path, db_path):
    program = tmp_path / "my_mailer.py"
    program.write_text(USER_MODULE)
    checked = cli_forkserver.run_argv(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "mypy_cache"),
            str(program),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("Success: no issues found in 1 source file")

    ran = cli_forkserver.run_argv(
        [sys.executable, str(program), str(db_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["2", "1", "1"]  # each delivered once


def test_the_lookup_protocol_is_checkable_at_run_time():
    from desktop_app.flow.outbox import Destination, LookupDestination, lookup_of

    class SendOnly:
        def send(self, idempotency_key: str, payload: object) -> None:
            return None

    class Both(SendOnly):
        def lookup(self, idempotency_key: str) -> None:
            return None

    assert isinstance(SendOnly(), Destination) and not isinstance(SendOnly(), LookupDestination)
    assert isinstance(Both(), LookupDestination)
    assert lookup_of(SendOnly()) is None
    assert lookup_of(Both()) is not None
