"""The launch report asks only about runs a person must decide on (issue 28).

A run of another mode of the same flow version (the CLI's ``digest
--model``) and a run a live process holds are no upgrade case; the buttons
put keeping first and failing last, so the default never destroys work.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from textual.widgets import Button, DataTable

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.launch_report import LaunchReportScreen
from desktop_app.config import load_settings
from desktop_app.flow.owners import _start_ticks
from desktop_app.flows import builtin_flows
from desktop_app.flows.digest import DigestState, build_digest_flow
from desktop_app.store.records import Lease
from tests.app_support import messages, settle, wait_until
from tests.test_app_inbox_settings import Approval, approve_flow, settings_for

SIZE = (120, 35)


def no_summary(_ctx: object, _path: str, _text: str) -> str:
    return "unused"


async def test_a_digest_model_run_is_not_an_older_version(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    model = build_digest_flow(summarizer=no_summary)
    cli = bootstrap.build_engine(settings, flows=[model])
    try:  # started and left pending, as a killed `flowdesk run digest --model` leaves it
        run_id = cli.start("digest", DigestState(folder=str(tmp_path), out=str(tmp_path)))
    finally:
        cli.store.close()
    app = FlowdeskApp(settings, flows=builtin_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert not isinstance(app.screen, LaunchReportScreen)
        # the app resumes it in its own mode: with no model configured it
        # says what to set, never that the flow changed
        (said,) = messages(app, "error")
        assert said.startswith(f"Run {run_id[:8]} was not resumed: ")
        assert "FLOWDESK_MODEL__BASE_URL and FLOWDESK_MODEL__MODEL" in said
        assert "was started under flow version" not in said
        assert app.engine is not None
        assert run_id not in [r.run_id for r in app.engine.incompatible_runs()]


def hold(settings_db: Path, run_id: str, pid: int) -> None:
    """Give the run's lease to process ``pid`` (a live process of this host)."""
    from desktop_app.store.sqlite.store import open_store

    store = open_store(settings_db)
    try:
        owner = f"{socket.gethostname()}:{pid}:abcdef@{_start_ticks(pid)}"
        now = store.now()
        store.claim(run_id, Lease(owner, now + 3600, issued_at=now), now)
    finally:
        store.close()


async def test_a_run_a_live_process_holds_is_not_asked_about(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    bootstrap.apply_schema(settings)
    old = bootstrap.build_engine(settings, flows=[approve_flow("1")])
    try:
        run_id = old.start("approve", Approval())
    finally:
        old.store.close()
    holder = subprocess.Popen(["sleep", "300"])
    try:
        hold(db, run_id, holder.pid)
        app = FlowdeskApp(settings, flows=[approve_flow("2")])
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert not isinstance(app.screen, LaunchReportScreen)
    finally:
        holder.kill()
        holder.wait()
    # its holder is gone: now a person decides, and keeping comes first (no
    # launch recovery here: its failed attempt would let go of the dead lease)
    app = FlowdeskApp(load_settings(db_path=db, recover_on_launch=False), flows=[approve_flow("2")])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        report = app.screen
        assert isinstance(report, LaunchReportScreen)
        assert [r.run_id for r in report.runs] == [run_id]
        status = report.query_one("#incompatible", DataTable).get_cell(run_id, "status").plain
        assert status == "interrupted"
        buttons = [b.id for b in report.query(Button)]
        assert buttons[0] == "keep" and buttons[-2:] == ["fail", "close"]
        assert report.query_one("#fail", Button).variant == "error"
        await pilot.press("enter")  # the table has focus: Enter decides nothing
        await settle(pilot)
        assert report.decision(run_id) == "undecided"


async def test_runs_left_for_a_person_keep_a_banner_until_each_is_acted_on(
    tmp_path: Path,
) -> None:
    """recovery = {approve = "ask"}: the notice stays across the session (not
    a toast that goes) and at every launch, until each run is resumed."""
    from desktop_app.app.screens.runs import RunsScreen
    from desktop_app.config import load_settings

    db = tmp_path / "t.db"
    settings = load_settings(db_path=db, recovery={"approve": "ask"})
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[approve_flow("1")])
    try:  # two runs started, never run: interrupted before they ran
        first = engine.start("approve", Approval())
        engine.start("approve", Approval())
    finally:
        engine.store.close()
    for _launch in range(2):
        app = FlowdeskApp(settings, flows=[approve_flow("1")])
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, RunsScreen)
            line = screen.asking_line
            assert line.display and line.message.startswith(
                "2 interrupted runs of approve wait for you"
            )
            await pilot.pause(0.2)
            assert line.message.startswith("2 interrupted runs")  # it stays
    app = FlowdeskApp(settings, flows=[approve_flow("1")])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        screen.table.follow(first)
        await pilot.press("r")  # resumed: it waits for its answer now
        await settle(pilot)
        assert screen.asking_line.message.startswith("1 interrupted run of approve")


async def test_a_run_a_live_process_holds_is_not_said_to_be_resumed(tmp_path: Path) -> None:
    """Launch recovery finds a pending run whose lease a live process holds: the
    notice says it runs elsewhere, never "Resumed 1 run ... 1 not resumed"."""
    db = tmp_path / "t.db"
    settings = settings_for(db)
    bootstrap.apply_schema(settings)
    old = bootstrap.build_engine(settings, flows=[approve_flow("1")])
    try:
        run_id = old.start("approve", Approval())
    finally:
        old.store.close()
    holder = subprocess.Popen(["sleep", "300"])
    try:
        hold(db, run_id, holder.pid)
        app = FlowdeskApp(settings, flows=[approve_flow("1")])
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            shown = messages(app)
    finally:
        holder.kill()
        holder.wait()
    assert not any(m.startswith("Resumed") for m in shown), shown
    assert "1 run is running in another process; nothing to resume" in shown, shown
    assert not messages_with(shown, "not resumed"), shown


def messages_with(shown: list[str], text: str) -> list[str]:
    return [m for m in shown if text in m]


def test_the_summary_counts_held_runs_apart_from_resumed_ones() -> None:
    from desktop_app.app.main import recovery_summary
    from desktop_app.errors import AgentRunLeasedError, RunLeasedError

    held = RunLeasedError("r1", "host:1:x", 0.0)
    assert recovery_summary([held, AgentRunLeasedError("r2", "host:2:y", 0.0)]) == (
        "2 runs are running in another process; nothing to resume",
        False,
    )
    assert recovery_summary([held, ValueError("boom")]) == (
        "Resumed 1 run: 0 completed, 0 failed, 1 not resumed; 1 run is running in another process",
        True,
    )


def test_the_summary_says_where_runs_db_copy_moved_went() -> None:
    """A run ``db copy`` moved (its lease ``moved to URL`` in the file) is
    not "running in another process": the launch summary says where it went."""
    from desktop_app.app.main import recovery_summary
    from desktop_app.errors import RunLeasedError

    moved = RunLeasedError("r1", "moved to postgresql://db.internal/flowdesk", 253402300799.0)
    held = RunLeasedError("r2", "host:1:x", 0.0)
    assert recovery_summary([moved]) == (
        "1 run moved to postgresql://db.internal/flowdesk (flowdesk db copy), not run here; "
        "nothing to resume",
        False,
    )
    assert recovery_summary([moved, held]) == (
        "1 run is running in another process; 1 run moved to postgresql://db.internal/flowdesk "
        "(flowdesk db copy), not run here; nothing to resume",
        False,
    )


@pytest.mark.slow
async def test_the_launch_summary_counts_an_interrupted_agent_run_db_copy_moved(
    tmp_path: Path, pg_url: str
) -> None:
    """An interrupted agent run ``db copy`` moved is counted where it went,
    as a moved flow run is (the summary said nothing of it: a tryout's
    finding); nothing resumes it on the file."""
    import time

    from desktop_app.agent.messages import Message
    from desktop_app.errors import redact
    from desktop_app.store.records import AgentRun
    from tests.cli_support import flowdesk

    db = tmp_path / "laptop.db"
    settings = load_settings(db_path=str(db))
    bootstrap.apply_schema(settings)
    services = bootstrap.open_services(settings, flows=[])
    try:
        now = time.time()
        rid = "a0" * 16
        run = AgentRun(rid, "ask", "running", "look it up", created_at=now, updated_at=now)
        services.agents.create(run, [Message("user", "look it up").to_json()])
    finally:
        services.close()
    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url)
    assert copied.returncode == 0, copied.stderr
    where = redact(pg_url, mask=None)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.recovery is not None, timeout=60)
        assert app.recovery == (
            f"1 run moved to {where} (flowdesk db copy), not run here; nothing to resume"
        )
    store = bootstrap.open_services(settings, flows=[])
    try:
        assert [m.get("role") for m in store.agents.messages(rid)] == ["user"]  # not resumed
    finally:
        store.close()


def test_the_summary_leaves_runs_of_a_changed_flow_to_the_launch_report() -> None:
    """A run refused because its flow changed since it started is not "not
    resumed" among the resumed ones (a tryout read "Resumed 2 runs: 0
    completed, 0 failed, 2 not resumed" when none was): the launch report,
    open beside the summary, lists it."""
    from desktop_app.app.main import recovery_summary
    from desktop_app.errors import FlowVersionMismatchError

    changed = [FlowVersionMismatchError(r, "1+aa", "2+bb") for r in ("r1", "r2")]
    assert recovery_summary(changed) == (
        "2 runs an earlier process left running are of a flow that changed since they started "
        "(see the launch report); nothing to resume",
        False,
    )
    assert recovery_summary([changed[0], ValueError("boom")]) == (
        "Resumed 1 run: 0 completed, 0 failed, 1 not resumed; 1 run an earlier process left "
        "running is of a flow that changed since it started (see the launch report)",
        True,
    )
