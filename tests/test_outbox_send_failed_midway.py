"""A send whose server died mid-call after making the effect, as users meet
it: a real HTTP destination on 127.0.0.1 (tests/outbox_server.py
``--drop-first``) makes the operation on the first POST of a key and then
closes the connection without answering, so the dispatcher (a real process,
tests/outbox_worker.py) sees a reset connection, a retryable error.

Its outcome is unknown: the intent stays ``sending`` (``show`` says it may
have been made), and the next dispatcher looks it up before sending it
again, so the destination gets one POST in all. Before, the intent went
back to ``pending`` and the next pass sent it again without asking (two
POSTs: a second effect at any destination that does not de-duplicate). A
destination with no lookup gets it again under the same idempotency key, and
the intent's error says so plainly.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from desktop_app.flow.outbox import SEND_FAILED, resent_unchecked
from desktop_app.runs_view import MAY_HAVE_BEEN_MADE
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.cli_support import flowdesk
from tests.test_outbox import count

HERE = Path(__file__).resolve().parent


@pytest.fixture
def dying_destination(tmp_path: Path) -> Iterator[str]:
    """The URL of a server that makes each key's first POST and then drops it."""
    portfile = tmp_path / "port"
    proc = cli_forkserver.popen(
        [sys.executable, str(HERE / "outbox_server.py"), str(portfile), "--drop-first"]
    )
    deadline = time.monotonic() + 10
    while not portfile.exists() or not portfile.read_text():
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{portfile.read_text()}"
    proc.kill()
    proc.wait()


def _dispatch(db_path: Path, url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    worker = [sys.executable, str(HERE / "outbox_worker.py"), str(db_path), url, *flags]
    done = subprocess.run(worker, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def _intent(db_path: Path) -> tuple[str, str, str, str | None, int]:
    store = open_store(db_path)
    try:
        (intent,) = store.intents(["pending", "sending", "delivered", "failed"])
        run_id = intent.run_id
        return run_id, intent.intent_id, intent.status, intent.last_error, intent.attempts
    finally:
        store.close()


def test_a_send_reset_after_the_effect_is_looked_up_not_sent_again(db_path, dying_destination):
    first = _dispatch(db_path, dying_destination)
    assert "delivered 0" in first.stdout
    run_id, key, status, error, attempts = _intent(db_path)
    assert count(dying_destination, key) == {"posts": 1, "ops": 1}  # made, then dropped
    # its outcome is unknown: still sending, never set back to pending
    assert (status, attempts) == ("sending", 1)
    assert error is not None and error.startswith(f"{SEND_FAILED}: "), error
    assert "no lookup" not in error  # this destination can be asked
    shown = flowdesk(db_path, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert f"1 side effect may have been made ({MAY_HAVE_BEEN_MADE})" in shown.stdout
    # the next dispatcher (another process) asks the destination: it has it
    second = _dispatch(db_path, dying_destination)
    assert "delivered 1" in second.stdout
    assert count(dying_destination, key) == {"posts": 1, "ops": 1}  # once
    assert _intent(db_path)[2:] == ("delivered", None, 1)
    assert "may have been made" not in flowdesk(db_path, "show", run_id).stdout


def test_a_destination_with_no_lookup_gets_it_again_under_the_same_key_and_is_told(
    db_path, dying_destination
):
    first = _dispatch(db_path, dying_destination, "--no-lookup")
    assert "delivered 0" in first.stdout
    _, key, status, error, _ = _intent(db_path)
    assert status == "sending"
    # said plainly where the user looks (the Outbox tab's last error)
    assert error is not None and error.endswith(f"; {resent_unchecked('payments')}"), error
    assert "made once only if 'payments' ignores a repeated key" in error
    second = _dispatch(db_path, dying_destination, "--no-lookup")
    assert "delivered 1" in second.stdout
    assert f"intent {key}: {resent_unchecked('payments')}" in second.stderr
    # sent again with the same key: this server de-duplicates it, so one operation
    assert count(dying_destination, key) == {"posts": 2, "ops": 1}
    assert _intent(db_path)[2:] == ("delivered", None, 2)
