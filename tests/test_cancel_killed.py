"""A ``cancel`` killed (``kill -9``) part-way never leaves a canceled run's
side effects queued for a dispatcher to make.

The status change and the withdrawal of the run's queued intents were two
transactions: a cancel killed between them left the run ``canceled`` with
its mail still ``pending``, and the next dispatcher (``resume --all``,
``flowdesk agent``, the app) sent it: an effect the user had canceled. Real
SQLite files and a real PostgreSQL, a real ``flowdesk``-style process
killed with ``SIGKILL`` at the instant the run reads back canceled.
"""

from __future__ import annotations

import signal
import sys

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.outbox import CANCELED, Dispatcher
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.cli_support import REPO
from tests.test_cancel_withdraws import Recorder, mailer


@pytest.mark.parametrize(("kind", "url"), [("sqlite_store", "db_path"), ("pg_store", "pg_url")])
def test_a_cancel_killed_once_the_run_is_canceled_left_nothing_to_send(request, kind, url):
    store = request.getfixturevalue(kind)
    db = str(request.getfixturevalue(url))
    flow = mailer()
    rid = Engine(store, flows=[flow], clock=ManualClock()).run(flow, {}).run_id
    assert store.undelivered_intents() == {rid: 1}

    killed = cli_forkserver.run_argv(
        [sys.executable, "tests/cancel_killed_worker.py", db, rid],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert store.get_run(rid).status == "canceled"  # the kill landed after the status change
    assert store.undelivered_intents() == {}, "a canceled run's mail is still queued"
    (withdrawn,) = store.intents(["failed"])
    assert withdrawn.last_error == CANCELED

    mail = Recorder()
    assert Dispatcher(store, {"mail": mail}).dispatch() == 0
    assert mail.got == []


def test_a_cancel_of_a_damaged_run_killed_once_it_is_canceled_left_nothing_to_send(db_path):
    """The same kill when the run's latest checkpoint is damaged (SQLite:
    the cancel ends it without reading it, ``end_unreadable``)."""
    from tests.test_damaged_checkpoint import _damage

    store = open_store(db_path)
    flow = mailer()
    rid = Engine(store, flows=[flow], clock=ManualClock()).run(flow, {}).run_id
    revision = store.get_run(rid).revision
    store.close()  # two SQLite libraries on one file in one process break its locks
    _damage(db_path, rid, revision)
    killed = cli_forkserver.run_argv(
        [sys.executable, "tests/cancel_killed_worker.py", str(db_path), rid],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = open_store(db_path)
    run = store.get_run(rid)
    assert run.status == "canceled" and "is damaged" in (run.error or "")
    assert store.undelivered_intents() == {}, "a canceled run's mail is still queued"
    mail = Recorder()
    assert Dispatcher(store, {"mail": mail}).dispatch() == 0
    assert mail.got == []
    store.close()
