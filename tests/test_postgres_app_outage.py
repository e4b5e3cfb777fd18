"""The app on PostgreSQL through a server outage.

The app's screens read the database on the UI thread (a poll every second,
the clock for every time shown); on PostgreSQL each read used to wait the
pool's ``postgres.connect_wait_s`` (30 s) per try, four tries, for a server
that had gone: the screen froze for minutes and said nothing. Now the first
try that finds the server unreachable puts a banner up at once, the screen
keeps answering keys, a worker thread looks for the server, and when it is
back the banner goes, the app says so and shows what changed meanwhile.
The cluster is this test's own (it is crashed and started again).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.help import HelpScreen
from desktop_app.app.screens.inbox import InboxScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.config import load_settings
from tests.app_support import messages, settle, wait_until
from tests.cli_support import flowdesk
from tests.pg_support import PrivateCluster
from tests.test_postgres_agent_outage import own_cluster  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.mark.scenario("S104")
async def test_the_app_on_postgres_says_the_server_is_away_keeps_answering_and_says_it_is_back(
    own_cluster: PrivateCluster,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{own_cluster.port}/postgres"
    monkeypatch.setenv("FLOWDESK_POSTGRES__RECONNECT_MAX_S", "0.5")
    applied = flowdesk(url, "db", "apply")  # the built-in flows' tables too
    assert applied.returncode == 0, applied.stderr
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "a.pdf").write_text("a")
    waiting = flowdesk(url, "start", "tidy", "--input", json.dumps({"folder": str(downloads)}))
    assert waiting.returncode == 0, waiting.stderr  # a question waits for approval
    app = FlowdeskApp(load_settings(db_path=url))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.engine is not None)
        banner = app.runs_screen.banner
        assert app.away is None and not banner.message
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen), timeout=10)
        open_inbox = app.screen
        assert isinstance(open_inbox, InboxScreen)
        await wait_until(pilot, lambda: open_inbox.loaded, timeout=30)
        assert open_inbox.status_text.startswith("1 flow question waits for you."), (
            open_inbox.status_text
        )
        own_cluster.crash()
        try:
            # the open inbox read again meanwhile keeps the question it listed
            open_inbox.reload()
            await wait_until(pilot, lambda: "As last read" in open_inbox.status_text, 60)
            assert open_inbox.status_text.startswith(
                "As last read: 1 flow question waits for you. Could not read it again: "
            ), open_inbox.status_text
            assert len(open_inbox.items) == 1
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen), timeout=10)
            # at the first read that met the outage (bounds on a hang, not timings)
            await wait_until(pilot, lambda: app.away is not None, timeout=60)
            said = banner.message
            first = f"The database server ({url}) cannot be reached: the app keeps trying"
            assert said.startswith(first), said
            # the screen still answers keys while the server is away
            for _ in range(2):
                await pilot.press("f1")
                await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), timeout=10)
                await pilot.press("escape")
                await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen), timeout=10)
            # the inbox opened meanwhile says it could not read, instead of
            # "Reading the inbox…" for minutes; no toast repeats the outage
            await pilot.press("i")
            await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen), timeout=10)
            inbox = app.screen
            assert isinstance(inbox, InboxScreen)
            await wait_until(pilot, lambda: inbox.loaded, timeout=30)
            # the cause once, never "nothing is waiting" (a tryout: the
            # question waiting was there, the read had failed)
            said = inbox.status_text
            assert said.startswith(
                "Could not read the inbox. Flow questions, agent questions and LangGraph "
                "questions: "
            ), said
            assert "Nothing is waiting" not in said and ".;" not in said, said
            assert not [m for m in messages(app) if "lost the connection" in m], messages(app)
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen), timeout=10)
        finally:
            own_cluster.restart()
        await wait_until(pilot, lambda: app.away is None, timeout=120)
        assert not banner.message
        assert "The database server can be reached again." in messages(app)
        # and what is done elsewhere shows again: a run started by the CLI
        folder = tmp_path / "notes"
        folder.mkdir()
        digest = json.dumps({"folder": str(folder), "out": str(tmp_path / "out")})
        started = flowdesk(url, "start", "digest", "--input", digest)
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.split()[0]
        table = app.runs_screen.table
        await wait_until(pilot, lambda: run_id in table.run_ids, timeout=60)


async def test_the_app_launched_while_its_server_is_down_waits_for_it_and_opens(
    own_cluster: PrivateCluster,  # noqa: F811
) -> None:
    """The app launched before its database server is up said it could not
    open the database and stayed so (a tryout's worker did the same): it
    says the server cannot be reached in the banner, tries again, and opens
    the database once the server answers."""
    url = f"postgresql://postgres@127.0.0.1:{own_cluster.port}/postgres"
    applied = flowdesk(url, "db", "apply")
    assert applied.returncode == 0, applied.stderr
    own_cluster.crash()
    app = FlowdeskApp(load_settings(db_path=url))
    async with app.run_test(size=(120, 40)) as pilot:
        banner = app.runs_screen.banner
        try:
            await wait_until(pilot, lambda: "until the server answers" in banner.message, 60)
            assert banner.message.startswith(f"cannot connect to PostgreSQL at {url}: ")
            assert app.engine is None and app.startup_error is None
        finally:
            own_cluster.restart()
        await wait_until(pilot, lambda: app.engine is not None, timeout=60)
        await settle(pilot)
        assert not banner.message and app.startup_error is None
