"""Defects a new user's tryout found, each as a whole behaviour: tool calls
whose arguments hold a path or a URL listed as tool calls (an unknown
outcome as ``unknown``) by ``show``, ``show -o json`` and the app; a
database password in a URL's query string (or a libpq keyword string)
never printed; malformed JSON in a ``FLOWDESK_*`` variable and a
``FLOWDESK_CONFIG`` naming no file as typed errors; ``export --out``
on a file or an uncreatable folder a typed error that writes nothing;
``db copy`` into a database holding runs, and ``undo`` of a run of another
flow, worded right. Real ``flowdesk`` subprocesses, real SQLite files in
``tmp_path``, a real PostgreSQL server where one is involved."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from desktop_app.agent.tools import is_tool_call
from tests import cli_forkserver
from tests.cli_support import REPO, as_printed, flowdesk

#: arguments a file-system, git or fetch tool gets every day
LONDON = {"timezone": "Europe/London"}
PATH_ARGS = {"path": "/home/me/notes/a:b.md"}
URL_ARGS = {"url": "https://example.com/a/b?x=1#frag"}


class Crash(BaseException):
    """The process dies with a tool call in flight."""


def agent_run_with_slashes(db: Path) -> str:
    """An agent run in the real SQLite file ``db``: three tool calls whose
    arguments hold "/" (a time zone, a path, a URL); the third, an
    at-most-once send, is in flight when the process dies and is resumed:
    its outcome is unknown. Returns the run id."""
    from desktop_app import bootstrap
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.tools import Tool
    from desktop_app.config import load_settings
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    def get_current_time(timezone: str) -> str:
        """The time in a zone."""
        return f"12:00 in {timezone}"

    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    def fetch(url: str) -> str:
        """Post to a URL."""
        raise Crash

    sender = Tool(fetch, name="fetch__post")
    sender.at_most_once = True  # type: ignore[misc]
    tools = [
        Tool(get_current_time, name="time__get_current_time"),
        Tool(read_file, name="filesystem__read_file", read_only=True),
        sender,
    ]
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    store = bootstrap.open_sqlite_store(settings)
    try:
        agents = SqliteAgentStore(store)
        script: list[Any] = [
            {"tool": "time__get_current_time", "args": LONDON, "id": "c1"},
            {"tool": "filesystem__read_file", "args": PATH_ARGS, "id": "c2"},
            {"tool": "fetch__post", "args": URL_ARGS, "id": "c3"},
            "not sure the post went",
        ]
        run_id = "s" * 32
        with pytest.raises(Crash):
            Agent("helper", ScriptedModel(script), agents, tools).ask("go", run_id=run_id)
        agents.release(run_id, agents.get(run_id).lease_owner)
        done = Agent("helper", ScriptedModel(script[3:]), agents, tools).resume(run_id)
        assert done.status == "done"
    finally:
        store.close()
    return run_id


# -- 1. a "/" in a call's arguments never makes it a record ---------------------


def test_show_lists_calls_with_paths_and_urls_in_their_arguments_and_the_unknown_outcome(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    run_id = agent_run_with_slashes(db)
    shown = flowdesk(db, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "tool calls: 3\n" in out, out
    table = [line.split() for line in out.split("tool calls: 3\n", 1)[1].splitlines()[:3]]
    assert [(row[0], row[1]) for row in table] == [
        ("time__get_current_time", "completed"),
        ("filesystem__read_file", "completed"),
        ("fetch__post", "unknown"),  # said plainly: whether the post happened is unknown
    ]
    recorded = [line for line in out.splitlines() if line.startswith("recorded:")]
    assert recorded == ["recorded: toolset"], out  # only the run's own record

    as_json = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
    rows = {t["tool"]: t for t in as_json["tool_results"]}
    assert {name: rows[name]["kind"] for name in rows} == {
        "time__get_current_time": "call",
        "filesystem__read_file": "call",
        "fetch__post": "call",
        "toolset": "record",
    }
    assert rows["fetch__post"]["outcome_unknown"] is True
    assert [n for n in rows if rows[n]["outcome_unknown"]] == ["fetch__post"]


async def test_the_app_run_detail_lists_calls_with_paths_and_urls_as_calls(
    tmp_path: Path,
) -> None:
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings
    from tests.test_app_agents import SIZE, open_run, open_screen

    db = tmp_path / "a.db"
    run_id = agent_run_with_slashes(db)
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot)
        await open_run(pilot, screen, run_id)
        tools = screen.tools_table
        rows = [[c.plain for c in tools.get_row_at(i)] for i in range(tools.row_count)]
        assert [row[:2] for row in rows] == [
            ["time__get_current_time", "completed"],
            ["filesystem__read_file", "completed"],
            ["fetch__post", "unknown"],
        ]


def test_a_journal_key_is_classified_by_its_structure_never_its_arguments() -> None:
    """The keys as the real code builds them: calls (one read-only, with its
    place), and each kind of record kept beside them."""
    from desktop_app.agent.approvals import ApprovalRequest
    from desktop_app.agent.messages import ToolCall
    from desktop_app.agent.tools import (
        LISTING_PREFIX,
        PYDANTIC_AI_PREFIX,
        TOOL_SOURCES_KEY,
        TOOLSET_KEY,
    )

    for args in (LONDON, PATH_ARGS, URL_ARGS, {"q": "agent/toolset"}, {"k": "approval/1:x"}):
        key = ToolCall("c", "git__git_log", args).key
        assert is_tool_call(key) and is_tool_call(f"{key}#3"), key
    approval = ApprovalRequest.of("fs__write_file", PATH_ARGS, 1).key
    for record in (TOOLSET_KEY, TOOL_SOURCES_KEY, f"{LISTING_PREFIX}notes", approval):
        assert not is_tool_call(record), record
    call = f"{PYDANTIC_AI_PREFIX}helper__mcp_server__fs.call_tool#2"
    request = f"{PYDANTIC_AI_PREFIX}helper__model_request#1"
    assert is_tool_call(call) and not is_tool_call(request)


# -- 2. a database password is never printed -------------------------------------

SECRET = "s3cretPw9"


def no_secret(*outs: subprocess.CompletedProcess[str]) -> None:
    for out in outs:
        assert SECRET not in out.stdout + out.stderr, out.stdout + out.stderr
        assert "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://foo@127.0.0.1:1/x?password={SECRET}",
        f"postgresql://foo@127.0.0.1:1/x?sslmode=disable&sslpassword={SECRET}",
        f"postgresql://foo:{SECRET}@127.0.0.1:1/x?PassWord={SECRET}",
    ],
)
def test_a_password_in_the_url_query_is_masked_in_errors(tmp_path: Path, url: str) -> None:
    """Nothing listens on port 1: the error names the URL, its secrets masked."""
    ran = flowdesk(url, "runs")
    assert ran.returncode != 0
    no_secret(ran)
    assert "cannot connect to PostgreSQL at postgresql://foo" in ran.stderr
    assert "=***" in ran.stderr


def test_a_libpq_keyword_string_is_refused_without_echoing_it(tmp_path: Path) -> None:
    conninfo = f"host=127.0.0.1 port=1 dbname=x password={SECRET}"
    ran = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--db", conninfo, "db", "apply"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    no_secret(ran)
    assert "libpq keyword string" in ran.stderr
    assert "--db postgresql://USER@HOST:PORT/DBNAME" in ran.stderr
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after it


@pytest.mark.postgres
def test_agent_banner_log_and_hints_never_show_a_query_string_password(
    pg_url: str, tmp_path: Path
) -> None:
    url = f"{pg_url}?application_name=tryout&password={SECRET}"
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    worker = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", url, "agent"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    assert worker.stderr is not None
    banner = worker.stderr.readline()
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=60)
    assert banner.startswith("flowdesk agent: ") and " postgresql://" in banner, banner + err
    assert "password=***" in banner and SECRET not in banner + out + err
    log = state / "flowdesk" / "log" / "flowdesk.log"
    assert not log.exists() or SECRET not in log.read_text()
    # a hint carries the user's URL without the password (libpq reads PGPASSWORD)
    missing = flowdesk(url, "show", "nope")
    no_secret(missing)
    assert missing.returncode != 0 and "flowdesk --db" in missing.stderr, missing.stderr
    assert "leave out the database password" in missing.stderr


@pytest.mark.postgres
async def test_the_app_title_and_settings_never_show_the_database_password(pg_url: str) -> None:
    from textual.widgets import Static

    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings
    from tests.test_app_agents import SIZE
    from tests.test_app_inbox_settings import open_settings

    url = pg_url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")
    app = FlowdeskApp(load_settings(db_path=f"{url}?password={SECRET}"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_settings(pilot)
        shown = str(screen.query_one("#db-path", Static).render())
        assert "postgres:***@" in shown and "password=***" in shown, shown
        assert SECRET not in shown + app.sub_title + app.title
        assert "password=***" in app.sub_title


@pytest.mark.postgres
def test_the_db_apply_hint_of_an_empty_database_runs_as_printed_without_the_password(
    pg_empty_url: str,
) -> None:
    url = f"{pg_empty_url}?password={SECRET}"
    missing = flowdesk(url, "runs")
    assert missing.returncode == 1
    no_secret(missing)
    hint = missing.stderr.split("run `", 1)[1].split("`", 1)[0]
    assert hint == f"flowdesk --db {shlex.quote(pg_empty_url)} db apply"
    assert "(libpq reads the password from PGPASSWORD or ~/.pgpass)" in missing.stderr
    applied = as_printed(hint, {**os.environ, "PGPASSWORD": SECRET})
    assert applied.returncode == 0, applied.stderr
    assert flowdesk(url, "runs").returncode == 0


def test_the_db_apply_hint_of_a_file_without_schema_runs_as_printed(tmp_path: Path) -> None:
    """The hint is quoted for a shell: a path with a space runs as printed."""
    db = tmp_path / "my notes" / "e.db"
    db.parent.mkdir()
    db.write_bytes(b"")  # an empty file: a SQLite database without the schema
    missing = flowdesk(db, "runs")
    assert missing.returncode == 1, missing.stderr
    hint = missing.stderr.split("run `", 1)[1].split("`", 1)[0]
    assert hint == f"flowdesk --db {shlex.quote(str(db))} db apply"
    applied = subprocess.run(["bash", "-c", hint], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PATH": f"{Path(sys.executable).parent}:"
                                  f"{os.environ['PATH']}", "PYTHONPATH": str(REPO)})  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    assert flowdesk(db, "runs").stdout.strip() == "no runs"


# -- 3. settings variables that are not JSON, a FLOWDESK_CONFIG naming no file ----


@pytest.mark.parametrize(
    ("var", "value", "shape"),
    [
        ("FLOWDESK_FLOWS", '["x"', "a JSON list"),
        ("FLOWDESK_PYDANTIC_AI_AGENTS", "notjson", "a JSON list"),
        ("FLOWDESK_MCP_SERVERS", "{", "a JSON object"),
    ],
)
def test_a_settings_variable_that_is_not_json_is_a_typed_error(
    tmp_path: Path, var: str, value: str, shape: str
) -> None:
    ran = flowdesk(tmp_path / "a.db", "runs", env={var: value})
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr and "SettingsError" not in ran.stderr
    assert ran.stderr.startswith(f"flowdesk: invalid settings ({var}: not valid JSON: ")
    assert f"it takes {shape}" in ran.stderr and "fix or unset it" in ran.stderr


def test_an_explicit_config_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    for gone in (tmp_path / "nonexistent" / "c.toml", tmp_path / "typo.toml"):
        ran = flowdesk(db, "runs", env={"FLOWDESK_CONFIG": str(gone)})
        assert ran.returncode == 2, ran.stderr
        assert f"FLOWDESK_CONFIG names {gone}, which does not exist; fix the path" in ran.stderr
    folder = flowdesk(db, "runs", env={"FLOWDESK_CONFIG": str(tmp_path)})
    assert folder.returncode == 2 and "a folder; point it at a TOML file" in folder.stderr
    empty = tmp_path / "c.toml"
    empty.write_text("")
    assert flowdesk(db, "runs", env={"FLOWDESK_CONFIG": str(empty)}).returncode == 0
    # the default settings file may be missing: no FLOWDESK_CONFIG, an empty config dir
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    env.pop("FLOWDESK_CONFIG", None)
    default = cli_forkserver.run(["--db", str(db), "runs"], env=env, cwd=REPO, timeout=120)
    assert default.returncode == 0, default.stderr


# -- 4. export --out that cannot be the export's folder --------------------------


def test_export_out_on_a_file_or_an_uncreatable_folder_is_a_typed_error(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    afile = tmp_path / "hostname"
    afile.write_text("mine\n")
    on_file = flowdesk(db, "export", "--out", str(afile))
    assert on_file.returncode == 2, on_file.stderr
    assert "Traceback" not in on_file.stderr
    assert f"{afile} is a file, not a folder; nothing was written" in on_file.stderr
    assert afile.read_text() == "mine\n"
    for bad in (afile / "sub", Path("/proc/nope")):
        ran = flowdesk(db, "export", "--out", str(bad))
        assert ran.returncode == 2, ran.stderr
        assert "Traceback" not in ran.stderr
        assert f"cannot create the folder {bad} (" in ran.stderr
        assert "nothing was written: give --out a folder you can create and write" in ran.stderr
    made = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("s.db"))
    assert made == ["hostname"]  # no export folder, no file


# -- 5. wording ------------------------------------------------------------------


def test_undo_of_a_run_of_another_flow_names_that_flow(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    env = {"FLOWDESK_FLOWS": '["desktop_app.examples.approval:approval"]'}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=env)
    assert started.returncode == 0, started.stderr
    rid = started.stdout.split()[0]
    undo = flowdesk(db, "undo", rid, env=env)
    assert undo.returncode == 2, undo.stderr
    assert f"run {rid} is a run of flow 'approval', not a tidy run; nothing to undo" in (
        undo.stderr
    )


@pytest.mark.postgres
def test_db_copy_into_a_database_holding_runs_counts_both_kinds_and_its_hint_runs(
    pg_url: str, tmp_path: Path
) -> None:
    """A target holding 1 flow run and 2 agent runs (an earlier copy): the
    second copy refuses, counts both, and the command it names lists them."""
    from desktop_app.store.postgres.copy import copy_sqlite_to_postgres

    db = tmp_path / "a.db"
    env = {"FLOWDESK_FLOWS": '["desktop_app.examples.approval:approval"]'}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    assert flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=env).returncode == 0
    add_agent_runs(db, 2)
    copy_sqlite_to_postgres(db, pg_url)
    url = f"{pg_url}?password={SECRET}"  # the test cluster trusts; the password is ignored
    again = flowdesk(db, "db", "copy", "--from", str(db), "--to", url, env=env)
    assert again.returncode == 1, again.stderr
    no_secret(again)
    shown = shlex.quote(f"{pg_url}?password=***")
    assert f"flowdesk: {shown.strip(chr(39))} already holds 1 flow run and 2 agent runs" in (
        again.stderr
    )
    hint = again.stderr.split("see what it holds with `", 1)[1].split("`", 1)[0]
    assert hint == f"flowdesk --db {pg_url} runs"
    listed = as_printed(hint, {**os.environ, **env, "PGPASSWORD": SECRET})
    assert listed.returncode == 0, listed.stderr
    kinds = [line.split()[1] for line in listed.stdout.splitlines()[1:]]
    assert sorted(kinds) == ["agent", "agent", "flow"], listed.stdout


@pytest.mark.postgres
def test_db_copy_refused_names_a_command_per_scope_the_target_holds_runs_in(
    pg_url: str, tmp_path: Path
) -> None:
    """The refusal counts the runs of every scope, while `runs` lists one
    scope: it names one command per scope (the user's own without
    `--scope`), and each, run as printed, lists that scope's runs."""
    from desktop_app.store.postgres.copy import copy_sqlite_to_postgres

    db = tmp_path / "a.db"
    env = {"FLOWDESK_FLOWS": '["desktop_app.examples.approval:approval"]'}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    for scope, order in (("default", "o-1"), ("team-a", "o-2")):
        started = flowdesk(
            db, "--scope", scope, "start", "approval", "--input", json.dumps({"order": order}),
            env=env,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
    copy_sqlite_to_postgres(db, pg_url)
    again = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=env)
    assert again.returncode == 1, again.stderr
    assert f"{pg_url} already holds 2 flow runs; nothing was copied" in again.stderr
    looks = again.stderr.split("see what it holds with ", 1)[1].strip().split(" and ")
    assert looks == [
        f"`flowdesk --db {pg_url} runs`",
        f"`flowdesk --db {pg_url} --scope team-a runs`",
    ], again.stderr
    orders = []
    for look in looks:
        listed = as_printed(look.strip("`"), {**os.environ, **env})
        assert listed.returncode == 0, listed.stderr
        (row,) = listed.stdout.splitlines()[1:]
        orders.append(row.split()[0])
    assert len(set(orders)) == 2  # two different runs, one per scope


def add_agent_runs(db: Path, n: int) -> None:
    """``n`` finished agent runs in the SQLite file ``db``."""
    from desktop_app import bootstrap
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.config import load_settings
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    settings = load_settings(db_path=db)
    store = bootstrap.open_sqlite_store(settings)
    try:
        agents = SqliteAgentStore(store)
        for i in range(n):
            Agent("helper", ScriptedModel([f"done {i}"]), agents, []).ask(f"q{i}")
    finally:
        store.close()


def test_a_bad_value_in_a_variable_names_the_variable_not_a_settings_file_that_is_not_there(
    tmp_path: Path,
) -> None:
    """A tryout's ``FLOWDESK_WORKER=perhaps`` was told to fix a config.toml
    that did not exist; the variable is named, with its value."""
    ran = flowdesk(tmp_path / "a.db", "runs", env={"FLOWDESK_WORKER": "perhaps"})
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.startswith("flowdesk: invalid settings (worker: ")
    assert ran.stderr.rstrip().endswith("; set by FLOWDESK_WORKER=perhaps: fix or unset it")
    assert "config.toml" not in ran.stderr
    # a bad value in the settings file names the file
    config = tmp_path / "config.toml"
    config.write_text("worker = 'perhaps'\n")
    from_file = flowdesk(tmp_path / "a.db", "runs", env={"FLOWDESK_CONFIG": str(config)})
    assert from_file.returncode == 2, from_file.stderr
    assert from_file.stderr.rstrip().endswith(f"; fix {config}")
    assert "FLOWDESK_WORKER" not in from_file.stderr
