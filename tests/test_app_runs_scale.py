"""The runs screen on a file with 20,000 runs: one bounded page, paging, filters, live rows.

The benchmark (``benchmarks/bench_app_runs.py``) times the same screen on
100,000 runs; these tests prove the behaviour that keeps it fast: the
screen never lists runs without a limit, and shows one page at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, Select

from desktop_app.app.main import INTERRUPTED, FlowdeskApp
from desktop_app.app.screens.runs import PAGE, RunsScreen
from desktop_app.app.widgets.run_filters import RunFilter
from desktop_app.config import load_settings
from desktop_app.store.protocol import Checkpoint, RunRecord
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store
from tests.runs_corpus import START, make_runs_db, run_id_of
from tests.test_app import settle, wait_until

N = 20_000
SIZE = (120, 40)


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_runs_db(tmp_path_factory.mktemp("scale") / "runs.db", N)


@pytest.fixture
def db(big_db: Path, tmp_path: Path) -> Path:
    """A private copy of the 20,000-run file (tests that write get their own)."""
    copy = tmp_path / "runs.db"
    copy.write_bytes(big_db.read_bytes())
    return copy


@pytest.fixture
def list_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every ``list_runs`` call made on a SQLite store while the test runs."""
    calls: list[dict[str, Any]] = []
    real = SqliteCheckpointStore.list_runs
    lock = threading.Lock()

    def spy(self: SqliteCheckpointStore, *args: Any, **kwargs: Any) -> list[RunRecord]:
        names = ("statuses", "flow_name", "limit", "offset", "newest_first")
        call = {**dict(zip(names, args, strict=False)), **kwargs, "store": self}
        with lock:
            calls.append(call)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SqliteCheckpointStore, "list_runs", spy)
    return calls


def open_app(db: Path) -> FlowdeskApp:
    return FlowdeskApp(load_settings(db_path=db))


def screen_of(app: FlowdeskApp) -> RunsScreen:
    return app.runs_screen


async def until(pilot: Pilot[None], check: Callable[[], bool]) -> None:
    await wait_until(pilot, check, timeout=10.0)


@pytest.mark.slow
async def test_first_page_renders_and_pages_move(
    db: Path, list_calls: list[dict[str, Any]]
) -> None:
    app = open_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        table = screen.table
        assert table.row_count == PAGE
        newest = [run_id_of(N - 1 - i) for i in range(PAGE)]
        assert table.run_ids == newest
        assert screen.has_more and screen.page == 0
        assert screen.page_line.message == f"Runs 1-{PAGE} · ] next page"

        await pilot.press("]")
        assert screen.page == 1
        assert table.run_ids == [run_id_of(N - 1 - PAGE - i) for i in range(PAGE)]
        assert table.cursor_row == 0
        assert screen.page_line.message == (
            f"Runs {PAGE + 1}-{2 * PAGE} · [ previous · ] next page"
        )
        await pilot.press("]")
        assert table.run_ids[0] == run_id_of(N - 1 - 2 * PAGE)

        await pilot.press("[", "[")
        assert screen.page == 0 and table.run_ids == newest
        await pilot.press("[")  # already on the first page: nothing moves
        assert screen.page == 0

        # The selected run opens from any page.
        await pilot.press("]", "down", "enter")
        assert app.screen.__class__.__name__ == "RunDetailScreen"
        assert getattr(app.screen, "run_id", None) == run_id_of(N - 2 - PAGE)
        await pilot.press("escape")

    # Every list_runs on the UI's store (all the screens' reads) is bounded by
    # a page and one. (Launch recovery lists the interrupted runs, if any,
    # unbounded; the engine's own launch-time scans run on its store.)
    ui = [c for c in list_calls if c["store"] is app.reader]
    assert ui, "the screen lists runs through the UI's store"
    unbounded = [c for c in ui if c.get("limit") is None]
    assert all(tuple(c.get("statuses") or ()) == INTERRUPTED for c in unbounded), unbounded
    assert all(c["limit"] <= PAGE + 1 for c in ui if c.get("limit") is not None)


async def test_the_last_page_says_so(tmp_path: Path) -> None:
    db = make_runs_db(tmp_path / "small.db", PAGE + 5)
    app = open_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        await pilot.press("]")
        assert screen.page == 1 and not screen.has_more
        assert screen.table.run_ids == [run_id_of(i) for i in range(4, -1, -1)]
        assert screen.page_line.message == f"Runs {PAGE + 1}-{PAGE + 5} · [ previous"
        await pilot.press("]")  # no next page
        assert screen.page == 1


@pytest.mark.slow
async def test_filters_narrow_the_page(db: Path, list_calls: list[dict[str, Any]]) -> None:
    app = open_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        table = screen.table
        assert screen.filters is None  # mounted when first opened

        await pilot.press("slash")
        bar = screen.filters
        assert bar is not None and bar.is_open
        assert isinstance(app.focused, Input) and app.focused.id == "filter-search"

        # An exact run id (keys the table binds are typed into the field, not run).
        wanted = run_id_of(12_345)
        await pilot.press(*wanted, "enter")
        assert table.run_ids == [wanted]
        assert screen.filter == RunFilter(search=wanted)
        assert "matching id, flow or key=" in screen.page_line.message

        # A flow key.
        app.query_one("#filter-search", Input).value = ""
        await pilot.press(*"key-120", "enter")
        assert table.run_ids == [run_id_of(120)]

        # A prefix of run ids lists the runs whose id starts with it, newest first
        # (this corpus's ids differ only in their last characters).
        app.query_one("#filter-search", Input).value = ""
        await pilot.press(*wanted[:-1], "enter")
        assert table.run_ids == [run_id_of(i) for i in range(0x303F, 0x302F, -1)]
        # Text that is no run id's start matches nothing.
        app.query_one("#filter-search", Input).value = ""
        await pilot.press(*"ffffffffff", "enter")
        assert table.run_ids == []
        assert screen.page_line.message.startswith("No runs matching")

        # Status and flow selects, tenant and session fields (all list_runs filters).
        app.query_one("#filter-search", Input).value = ""
        await pilot.press("enter")
        app.query_one("#filter-status", Select).value = "waiting"
        await pilot.pause()
        assert table.row_count == PAGE and screen.has_more
        assert {table.cell(r, "status") for r in table.run_ids} == {"waiting"}
        flows = app.query_one("#filter-flow", Select)
        flows.value = "deploy"
        await pilot.pause()
        # run i: status i % 6 == 5 is waiting, so i % 3 == 2: flow deploy, tenant initech.
        assert table.run_ids[:3] == [run_id_of(i) for i in (19_997, 19_991, 19_985)]
        # focused as a click would (a click on a machine under load could land
        # before the bar's layout, and the keys then went to the table)
        app.query_one("#filter-tenant", Input).focus()
        await pilot.pause()
        assert isinstance(app.focused, Input) and app.focused.id == "filter-tenant"
        await pilot.press(*"initech", "enter")
        await settle(pilot)
        # The same runs (every waiting deploy run is initech's).
        assert table.run_ids[:3] == [run_id_of(i) for i in (19_997, 19_991, 19_985)]
        # focused as a click would (a click on a machine under load could land
        # before the bar's layout, and the keys then went to the table)
        app.query_one("#filter-session", Input).focus()
        await pilot.pause()
        assert isinstance(app.focused, Input) and app.focused.id == "filter-session"
        await pilot.press(*"s97", "enter")
        await settle(pilot)
        assert table.run_ids[:2] == [run_id_of(i) for i in (19_997, 19_697)]
        assert screen.filter == RunFilter(
            status="waiting", flow="deploy", tenant="initech", session="s97"
        )
        ui = [c for c in list_calls if c["store"] is app.reader]
        assert all(c["limit"] is not None and c["limit"] <= PAGE + 1 for c in ui[-3:])

        # escape closes the bar, clears the filter (hidden, it would leave the
        # table short with no visible reason) and gives the table the keys back.
        await pilot.press("escape")
        assert not bar.is_open and app.focused is table
        assert screen.filter == RunFilter()
        assert table.run_ids[0] == run_id_of(19_999)


async def test_a_new_run_from_another_connection_shows_on_the_first_page(db: Path) -> None:
    app = open_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert screen.table.run_ids[0] == run_id_of(N - 1)
        store = open_store(db)
        try:
            rid = "new-run-from-elsewhere"
            at = START + N + 10
            store.create_run(
                RunRecord(rid, "digest", "v1", "running", 0, at, at),
                Checkpoint(rid, 0, "running", {}, {}, (), at),
            )
        finally:
            store.close()
        await until(pilot, lambda: screen.table.run_ids[:1] == [rid])
        assert screen.table.row_count == PAGE
        assert screen.table.run_ids[1] == run_id_of(N - 1)
