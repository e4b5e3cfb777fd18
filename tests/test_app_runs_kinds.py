"""Agent runs in the runs table beside flow runs: kind column, kind filter,
statuses in the flow vocabulary, merged newest first, enter opens the
conversation. Driven headless with Pilot over a real SQLite file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from desktop_app import bootstrap
from desktop_app.agent import Agent, ScriptedModel
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.agent_runs import AgentRunsScreen
from desktop_app.app.screens.confirm import ConfirmScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.widgets.run_filters import RunFilter
from desktop_app.config import Settings, load_settings
from desktop_app.flow.clock import ManualClock
from tests.app_support import settle
from tests.flows_for_tests import Numbers, counting_flow

SIZE = (140, 40)


def make_runs(settings: Settings) -> dict[str, str]:
    """flow run, done agent run, flow run, asking agent run; 100 s apart."""
    bootstrap.apply_schema(settings)
    flow = counting_flow(Counter())
    sv = bootstrap.open_services(settings, flows=[flow])
    clock = ManualClock()
    sv.engine.clock = clock
    ids: dict[str, str] = {}
    try:
        ids["flow_old"] = sv.engine.run(flow.name, Numbers()).run_id
        clock.advance(100)
        done = Agent("helper", ScriptedModel(["all done"]), sv.agents, clock=clock).ask("hi")
        assert done.status == "done"
        ids["agent_done"] = done.run_id
        clock.advance(100)
        ids["flow_new"] = sv.engine.run(flow.name, Numbers()).run_id
        clock.advance(100)
        asking = Agent(
            "travel",
            ScriptedModel([{"tool": "ask_user", "args": {"question": "Which city?"}}]),
            sv.agents,
            clock=clock,
        ).ask("book me a trip")
        assert asking.status == "input_required"
        ids["agent_asking"] = asking.run_id
    finally:
        sv.close()
    return ids


async def test_agent_runs_are_listed_beside_flow_runs_in_the_flow_vocabulary(
    tmp_path: Path,
) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    ids = make_runs(settings)
    app = FlowdeskApp(settings, flows=[counting_flow(Counter())])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.runs_screen.table
        assert table.run_ids == [
            ids["agent_asking"],
            ids["flow_new"],
            ids["agent_done"],
            ids["flow_old"],
        ]
        row = {k: table.cell(ids["agent_done"], k) for k in ("kind", "flow", "status", "progress")}
        assert row == {
            "kind": "agent",
            "flow": "helper",
            "status": "completed",
            "progress": "1 turn",
        }
        assert table.cell(ids["agent_asking"], "status") == "waiting"
        assert table.cell(ids["flow_new"], "kind") == "flow"
        assert table.cell(ids["flow_new"], "status") == "completed"


async def test_the_kind_and_status_filters_cover_agent_runs(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    ids = make_runs(settings)
    app = FlowdeskApp(settings, flows=[counting_flow(Counter())])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.runs_screen
        screen.set_filter(RunFilter(kind="agent"))
        await settle(pilot)
        assert screen.table.run_ids == [ids["agent_asking"], ids["agent_done"]]
        screen.set_filter(RunFilter(kind="flow"))
        await settle(pilot)
        assert screen.table.run_ids == [ids["flow_new"], ids["flow_old"]]
        screen.set_filter(RunFilter(status="waiting"))
        await settle(pilot)
        assert screen.table.run_ids == [ids["agent_asking"]]
        screen.set_filter(RunFilter(status="completed", flow="helper"))
        await settle(pilot)
        assert screen.table.run_ids == [ids["agent_done"]]
        screen.set_filter(RunFilter(search=ids["agent_done"][:8]))
        await settle(pilot)
        assert screen.table.run_ids == [ids["agent_done"]]
        # the filter bar offers the kind
        await pilot.press("slash")
        await settle(pilot)
        assert screen.query_one("#filter-kind") is not None


async def test_enter_on_an_agent_run_opens_its_conversation(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    ids = make_runs(settings)
    app = FlowdeskApp(settings, flows=[counting_flow(Counter())])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.runs_screen.table
        table.move_cursor(row=table.run_ids.index(ids["agent_done"]))
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AgentRunsScreen)
        assert screen.shown is not None and screen.shown.run.run_id == ids["agent_done"]
        assert "all done" in screen.conversation
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        # r on an agent run resumes it in its own screen; one waiting for a
        # person is not resumed there: it says to answer it in the inbox
        table.move_cursor(row=table.run_ids.index(ids["agent_asking"]))
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, AgentRunsScreen)
        assert any("waits for an answer: press i" in n.message for n in app.notices)
        await pilot.press("escape")
        await settle(pilot)
        # c cancels it as `flowdesk cancel` does, after asking (kept here)
        await pilot.press("c")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.startswith("Cancel agent run")
        await pilot.press("n")
        await settle(pilot)
        assert not any("is an agent run" in n.message for n in app.notices)


async def test_the_hint_counts_agent_runs_waiting_for_an_answer_and_i_opens_them(
    tmp_path: Path,
) -> None:
    """The runs screen's hint says how many runs wait for a person: flow runs
    (answered with a) and agent runs asking a question (answered in the
    inbox, which i opens). It once counted flow runs only, so an agent's
    question went unmentioned."""
    from desktop_app.examples.approval import Approval, approval
    from tests.app_support import open_inbox

    settings = load_settings(db_path=tmp_path / "t.db")
    ids = make_runs(settings)  # one agent run asks "Which city?"; no flow run waits
    flows = [counting_flow(Counter()), approval]
    app = FlowdeskApp(settings, flows=flows)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        hint = app.runs_screen.hint
        assert str(hint.render()) == "1 agent run is waiting for an answer: i opens the inbox."
        inbox = await open_inbox(pilot)
        assert [(i.kind, i.run_id, i.prompt) for i in inbox.items] == [
            ("agent", ids["agent_asking"], "Which city?")
        ]
    sv = bootstrap.open_services(settings, flows=flows)
    try:
        for order in ("o-1", "o-2"):
            assert sv.engine.run("approval", Approval(order=order)).status == "waiting"
    finally:
        sv.close()
    app = FlowdeskApp(settings, flows=flows)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert str(app.runs_screen.hint.render()) == (
            "2 runs are waiting: select one and press a to see what for. "
            "1 agent run is waiting for an answer: i opens the inbox."
        )
