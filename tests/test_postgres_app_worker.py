"""On PostgreSQL the app executes runs only when told to (``worker``,
``FLOWDESK_WORKER=1``): without it, launch recovery resumes nothing and a
digest started with ``n`` is saved for the workers, which execute it; with
it, the app executes both as on a SQLite file. Real server, real stores."""

from __future__ import annotations

import shlex
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.new_run import NewDigestScreen
from desktop_app.config import check_environment, load_settings
from desktop_app.flow import CompiledFlow, Engine
from desktop_app.flows.digest import build_digest_flow
from desktop_app.store.postgres.store import open_postgres_store
from tests.app_support import messages, settle, wait_until
from tests.digest_corpus import make_corpus
from tests.flows_for_tests import Crash, Numbers, counting_flow


def test_flowdesk_worker_is_a_setting_not_an_unknown_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLOWDESK_WORKER", "1")
    check_environment()  # refused as unknown before
    assert load_settings().worker is True
    monkeypatch.setenv("FLOWDESK_WORKER", "0")
    assert load_settings().worker is False


def interrupted_run(url: str, calls: Counter[str]) -> tuple[CompiledFlow[Any], str]:
    """A run left ``running`` at ``s2`` by a process that stopped (its step
    raised past the engine, as at Ctrl-C); the flow returned no longer crashes."""
    flow = counting_flow(calls, crash_in={"s2"})
    store = open_postgres_store(url)
    try:
        with pytest.raises(Crash):
            Engine(store, flows=[flow]).run(flow, Numbers(), run_id="i" * 32)
    finally:
        store.close()
    return flow, "i" * 32


async def start_digest_with_n(app: FlowdeskApp, pilot: Any, folder: Path, out: Path) -> str:
    """Press ``n``, fill in the form, start; returns the new run's id."""
    await pilot.press("n")
    form = app.screen
    assert isinstance(form, NewDigestScreen)
    await pilot.click("#folder")
    await pilot.press(*str(folder))
    await pilot.click("#out")
    await pilot.press(*str(out))
    await pilot.press("enter")
    await settle(pilot)
    table = app.runs_screen.table
    await wait_until(pilot, lambda: len(table.run_ids) == 2, timeout=30)
    (rid,) = [r for r in table.run_ids if r != "i" * 32]
    return rid


def stored_status(url: str, run_id: str, scope: str = "default") -> str:
    store = open_postgres_store(url, scope=scope)
    try:
        return store.get_run(run_id).status
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.slow
async def test_the_app_on_postgres_leaves_execution_to_the_workers(
    pg_url: str, tmp_path: Path
) -> None:
    calls: Counter[str] = Counter()
    flow, stuck = interrupted_run(pg_url, calls)
    make_corpus(tmp_path / "docs", 3)
    out = tmp_path / "out"
    digest = build_digest_flow()
    app = FlowdeskApp(load_settings(db_path=pg_url), flows=[flow, digest])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.engine is not None, timeout=30)
        await settle(pilot)
        rid = await start_digest_with_n(app, pilot, tmp_path / "docs", out)
        await settle(pilot)
        # nothing executed here: the interrupted run was not resumed, the digest only saved
        assert calls["s2"] == 1 and calls["s3"] == 0
        assert stored_status(pg_url, stuck) == "running"
        assert stored_status(pg_url, rid) == "pending"
        assert not (out / "digest.md").exists()
        table = app.runs_screen.table
        assert table.cell(rid, "status") == "pending"
        saved = f"Run {rid[:8]} is saved; a worker (flowdesk agent) executes it."
        assert messages(app)[-1] == saved
        # a worker executes both, and the app shows it
        worker = open_postgres_store(pg_url)
        try:
            report = Engine(worker, flows=[flow, digest]).recover()
        finally:
            worker.close()
        assert sorted((run.run_id, outcome.status) for run, outcome in report) == sorted(
            [(stuck, "completed"), (rid, "completed")]
        )
        await wait_until(pilot, lambda: table.cell(rid, "status") == "completed", timeout=30)
    assert (out / "digest.md").exists()
    assert (calls["s2"], calls["s3"]) == (2, 1)


@pytest.mark.postgres
@pytest.mark.slow
async def test_the_app_on_postgres_executes_when_it_is_a_worker(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWDESK_WORKER", "1")
    calls: Counter[str] = Counter()
    flow, stuck = interrupted_run(pg_url, calls)
    make_corpus(tmp_path / "docs", 3)
    out = tmp_path / "out"
    app = FlowdeskApp(load_settings(db_path=pg_url), flows=[flow, build_digest_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.recovery is not None, timeout=30)
        assert stored_status(pg_url, stuck) == "completed"  # launch recovery ran it here
        rid = await start_digest_with_n(app, pilot, tmp_path / "docs", out)
        await wait_until(pilot, lambda: (out / "digest.md").exists(), timeout=30)
        await settle(pilot)
        assert stored_status(pg_url, rid) == "completed"
    assert (calls["s2"], calls["s3"]) == (2, 1)


@pytest.mark.postgres
async def test_the_settings_on_postgres_offer_no_sqlite_durability(pg_url: str) -> None:
    """``synchronous`` is SQLite's: on PostgreSQL the server's own settings
    decide, so Settings does not offer it (a tryout saw "Durability (SQLite
    synchronous)" there); saving keeps the value the settings had."""
    from textual.widgets import Select

    from tests.test_app_inbox_settings import open_settings

    app = FlowdeskApp(load_settings(db_path=pg_url), flows=[])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = await open_settings(pilot)
        assert not screen.query_one("#synchronous", Select).display
        shown = [str(w.render()) for w in screen.query("Label") if w.display]
        assert shown and not any("SQLite synchronous" in text for text in shown), shown


@pytest.mark.postgres
async def test_the_app_on_postgres_makes_no_side_effect_of_a_run_a_worker_executed(
    pg_url: str, tmp_path: Path
) -> None:
    """A tidy approved in the app on PostgreSQL is executed by a worker, and
    its moves are the workers' to make (a laptop's app made a tidy's move
    on its own disk in a tryout: "1 move being made now by process <the
    app>"). The app leaves them queued; a worker's dispatcher makes them."""
    from desktop_app import bootstrap
    from desktop_app.flows.tidy import TidyState

    folder = tmp_path / "Downloads"
    folder.mkdir()
    (folder / "photo.jpg").write_bytes(b"jpg")
    settings = load_settings(db_path=pg_url)
    engine = bootstrap.build_engine(load_settings(db_path=pg_url, worker=True))  # a worker's
    try:
        run_id = engine.run("tidy", TidyState(folder=str(folder))).run_id  # waits for approval
        engine.resume_with(run_id, "yes")  # the worker goes on with it: its moves are queued
    finally:
        engine.store.close()
    store = open_postgres_store(pg_url)
    try:
        assert [i.status for i in store.open_intents(run_id)] == ["pending"]
    finally:
        store.close()
    app = FlowdeskApp(settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.engine is not None, timeout=30)
        for _ in range(30):  # 3 s: past the app's delivery pass (every 2 s)
            await pilot.pause(0.1)
        assert (folder / "photo.jpg").exists()  # not moved by the app
    store = open_postgres_store(pg_url)
    try:
        assert [i.status for i in store.open_intents(run_id)] == ["pending"]
    finally:
        store.close()


@pytest.mark.postgres
def test_show_of_a_run_saved_for_the_workers_names_the_worker_of_its_scope_as_printed(
    pg_url: str,
) -> None:
    """A run the app saved in scope 'team a' waits for a worker of that
    scope; ``show`` said nothing of it (a tryout's workers served 'default'
    and the run stayed pending with no next step). It names the command
    that starts one, and that command, run as printed, executes it."""
    import re

    from tests import hint_flows
    from tests.cli_support import flowdesk, spawn, stop_agent
    from tests.test_answer_hints import user_env

    env = user_env()  # FLOWDESK_FLOWS names tests.hint_flows, importable
    # saved as the app saves it on a database workers serve: pending, nobody's
    store = open_postgres_store(pg_url, scope="team a")
    try:
        run_id = (
            Engine(store, flows=[hint_flows.typed], executes=False)
            .run("typed", hint_flows.Order())
            .run_id
        )
    finally:
        store.close()
    shown = flowdesk(pg_url, "--scope", "team a", "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "status pending" in shown.stdout
    hint = re.search(r"^pending: .*; `(flowdesk [^`]+)` starts one$", shown.stdout, re.M)
    assert hint, shown.stdout
    assert "--scope 'team a' agent" in hint.group(1)
    argv = shlex.split(hint.group(1))[1:]
    agent = spawn(*argv, "--poll", "0.1", env=env)
    try:
        until_status = time.monotonic() + 60
        while time.monotonic() < until_status:
            if stored_status(pg_url, run_id, scope="team a") == "waiting":
                break
            time.sleep(0.1)
        assert stored_status(pg_url, run_id, scope="team a") == "waiting"  # it executed it
    finally:
        stop_agent(agent)


@pytest.mark.slow
@pytest.mark.postgres
async def test_a_run_the_app_saves_in_a_scope_names_the_worker_of_that_scope_as_printed(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app on PostgreSQL in scope 'team a' said "a worker (flowdesk
    agent) executes it" of a run no worker of that scope would take (the
    tryout's workers served 'default'): it names the scope and the command
    that starts its worker, which, run as printed, executes the run."""
    import re

    from tests.cli_support import spawn, stop_agent

    make_corpus(tmp_path / "docs", 2)
    out = tmp_path / "out"
    # the database and scope as the user gave them (here: the environment),
    # which the app's hints carry
    monkeypatch.setenv("FLOWDESK_DB_PATH", pg_url)
    monkeypatch.setenv("FLOWDESK_SCOPE", "team a")
    app = FlowdeskApp(load_settings())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.engine is not None, timeout=30)
        await pilot.press("n")
        await pilot.click("#folder")
        await pilot.press(*str(tmp_path / "docs"))
        await pilot.click("#out")
        await pilot.press(*str(out))
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("is saved" in m for m in messages(app)), timeout=30)
        said = next(m for m in messages(app) if "is saved" in m)
    assert "--scope 'team a' agent" in said, said
    hint = re.fullmatch(
        r"Run \w{8} is saved; a worker of scope 'team a' executes it \(`(flowdesk [^`]+)` "
        r"starts one\)\.",
        said,
    )
    assert hint, said
    agent = spawn(*shlex.split(hint.group(1))[1:], "--poll", "0.1")
    try:
        deadline = time.monotonic() + 60
        while not (out / "digest.md").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop_agent(agent)
    assert (out / "digest.md").exists(), agent.stderr.read() if agent.stderr else ""
