"""The ``flowdesk`` command as a user and a script run it: real processes,
fresh HOME/XDG dirs (conftest), real SQLite files.

Covers run ids (first line, prefixes, ambiguity, S73), agent runs in the
CLI, ``--json`` with ISO-8601 UTC times, exit codes as the README states
them, single-flight re-runs after a kill, config errors that name the
nearest key, ``--db`` as a path or URL, export times and file modes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests import cli_forkserver
from tests.cli_support import as_printed
from tests.digest_corpus import make_corpus

REPO = Path(__file__).resolve().parents[1]
APPROVAL = '["desktop_app.examples.approval:approval"]'
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def flowdesk(*args: str, env: dict[str, str] | None = None):
    return cli_forkserver.run(list(args), env={**os.environ, **(env or {})}, cwd=REPO, timeout=120)


def times_are_iso(obj: Any) -> int:
    """Assert every ``*_at`` value in a JSON document is ISO-8601 UTC (or null);
    return how many were checked."""
    n = 0
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.endswith("_at") and v is not None:
                assert isinstance(v, str) and ISO.match(v), (k, v)
                assert datetime.fromisoformat(v).utcoffset().total_seconds() == 0
                n += 1
            else:
                n += times_are_iso(v)
    elif isinstance(obj, list):
        n += sum(times_are_iso(x) for x in obj)
    return n


def jsonl(out: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def seeded(tmp_path: Path) -> tuple[Path, str]:
    """A database with one completed digest run; returns (db, run id)."""
    db = tmp_path / "f.db"
    make_corpus(tmp_path / "docs", 5)
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    out = flowdesk(
        "--db",
        str(db),
        "run",
        "digest",
        "--folder",
        str(tmp_path / "docs"),
        "--out",
        str(tmp_path / "o"),
    )
    assert out.returncode == 0, out.stderr
    return db, out.stdout.splitlines()[0]


def make_runs(db: Path) -> None:
    """Flow runs abcd1111…/abcd2222… (waiting), agent runs beef…(done, with a
    tool call) and cafe…(running), written through the composition root."""
    from desktop_app.bootstrap import open_services
    from desktop_app.config import load_settings
    from desktop_app.examples.approval import approval
    from desktop_app.store.sqlite.agent_runs import AgentRun

    sv = open_services(load_settings(db_path=db), flows=[approval])
    for rid in ("abcd1111" + "0" * 24, "abcd2222" + "0" * 24):
        sv.engine.run("approval", {"order": rid[:8]}, run_id=rid)
    now = time.time()
    for rid, status in (("beef" + "1" * 28, "running"), ("cafe" + "2" * 28, "running")):
        sv.agents.create(
            AgentRun(rid, "ask", status, "what is in todo.md?", now, now),
            [{"role": "user", "content": "what is in todo.md?"}],
        )
    call = {"id": "c1", "name": "read_file", "arguments": {"path": "todo.md"}}
    beef = "beef" + "1" * 28
    key = 'read_file:{"path":"todo.md"}'
    sv.agents.update(
        beef,
        now,
        messages=[{"role": "assistant", "content": "", "tool_calls": [call]}],
        tool=(key, "read_file", "in_progress", None),
    )
    sv.agents.update(
        beef,
        now,
        messages=[
            {"role": "tool", "content": "Buy milk.", "tool_call_id": "c1", "name": "read_file"},
            {"role": "assistant", "content": "You need to buy milk."},
        ],
        tool=(key, "read_file", "completed", "Buy milk."),
        status="done",
        response="You need to buy milk.",
        turns=2,
    )
    sv.close()


# -- run ids ------------------------------------------------------------------


def test_run_prints_its_id_first(tmp_path):
    db, rid = seeded(tmp_path)
    assert RUN_ID.match(rid)
    (row,) = jsonl(flowdesk("--db", str(db), "runs", "--json"))
    assert row["run_id"] == rid and row["kind"] == "flow"


@pytest.mark.scenario("S73")
def test_prefix_works_ambiguous_refused_for_every_run_command(tmp_path):
    db, rid = seeded(tmp_path)
    make_runs(db)
    d = ["--db", str(db)]
    env = {"FLOWDESK_FLOWS": APPROVAL}
    shown = flowdesk(*d, "show", rid[:8])
    assert shown.returncode == 0 and f"run {rid}" in shown.stdout
    for cmd in (["show"], ["resume"], ["cancel"], ["answer"], ["watch"], ["ask", "--resume"]):
        args = [*cmd, "abcd"] + (["yes"] if cmd == ["answer"] else [])
        out = flowdesk(*d, *args, env=env)
        assert out.returncode == 2, (cmd, out.stderr)
        assert "matches 2 runs" in out.stderr
        assert "abcd1111" + "0" * 24 in out.stderr and "abcd2222" + "0" * 24 in out.stderr
    answered = flowdesk(*d, "answer", "abcd1111", "yes", env=env)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == f"run abcd1111{'0' * 24} waiting"  # now for the signal
    canceled = flowdesk(*d, "cancel", "abcd2222", env=env)
    assert canceled.returncode == 0 and "canceled" in canceled.stdout
    unknown = flowdesk(*d, "show", "0123456789")
    assert unknown.returncode == 2
    assert "no run 0123456789 in scope 'default'" in unknown.stderr
    assert "a scope is a named set of runs" in unknown.stderr  # "scope" explained
    assert f"flowdesk --db {db} runs" in unknown.stderr  # the hint repeats --db
    # a run of another scope: the error names the scope it is in and a command
    # that shows it there (it used to list the runs of the scope asked, where it is not)
    other_scope = flowdesk(*d, "--scope", "work", "show", rid[:8])
    assert other_scope.returncode == 2
    assert f"no run {rid[:8]} in scope 'work'; it is a run of scope 'default'" in other_scope.stderr
    hint = other_scope.stderr.split("`")[1]
    assert hint == f"flowdesk --db {db} --scope default show {rid}"
    there = as_printed(hint, env=dict(os.environ))
    assert there.returncode == 0 and f"run {rid}" in there.stdout


def test_agent_runs_are_listed_shown_and_canceled(tmp_path):
    db, rid = seeded(tmp_path)
    make_runs(db)
    d = ["--db", str(db)]
    rows = jsonl(flowdesk(*d, "runs", "--json"))
    kinds = {r["run_id"][:4]: r["kind"] for r in rows}
    assert kinds == {"beef": "agent", "cafe": "agent", "abcd": "flow", rid[:4]: "flow"}
    created = [r["created_at"] for r in rows]
    assert created == sorted(created, reverse=True)  # newest first, like the app
    agents = jsonl(flowdesk(*d, "runs", "--json", "--kind", "agent", "--status", "completed"))
    assert [r["run_id"][:4] for r in agents] == ["beef"]  # done counts as completed
    table = flowdesk(*d, "runs", "--kind", "agent").stdout
    assert table.splitlines()[0].split()[:3] == ["RUN", "KIND", "FLOW"]
    assert "agent" in table and "2 turns" in table
    show = flowdesk(*d, "show", "beef")
    assert show.returncode == 0, show.stderr
    assert "assistant calls read_file" in show.stdout and "tool read_file: Buy milk." in show.stdout
    assert "read_file      completed    attempts 1" in show.stdout
    doc = json.loads(flowdesk(*d, "show", "beef", "--json").stdout)
    assert doc["kind"] == "agent" and doc["tool_results"][0]["status"] == "completed"
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert times_are_iso(doc) >= 2
    canceled = flowdesk(*d, "cancel", "cafe")
    assert canceled.returncode == 0 and canceled.stdout.strip().endswith("canceled")
    again = flowdesk(*d, "cancel", "cafe")
    assert again.returncode == 1 and "already canceled" in again.stderr
    saved = flowdesk(*d, "resume", "beef")  # done: its saved answer, no model needed
    assert saved.returncode == 0 and saved.stdout == "You need to buy milk.\n", saved.stderr


# -- --json everywhere ----------------------------------------------------------


def test_every_read_command_has_json_with_iso_times(tmp_path):
    db, rid = seeded(tmp_path)
    d = ["--db", str(db)]
    env = {"FLOWDESK_FLOWS": APPROVAL}
    started = flowdesk(*d, "start", "approval", "--input", '{"order": "o-1"}', env=env)
    assert started.returncode == 0, started.stderr
    waiting_id = started.stdout.splitlines()[0]
    checked = 0
    for args in (["runs"], ["waiting"], ["flows"], ["db", "status"]):
        rows = jsonl(flowdesk(*d, *args, "--json", env=env))
        assert rows, args
        checked += times_are_iso(rows)
    (waiting,) = jsonl(flowdesk(*d, "waiting", "--json", env=env))
    assert waiting["run_id"] == waiting_id and waiting["waits"][0]["kind"] == "input"
    assert ISO.match(waiting["waits"][0]["deadline_at"])
    for args in (["show", rid], ["doctor"]):
        out = flowdesk(*d, *args, "--json", env=env)
        doc = json.loads(out.stdout)
        checked += times_are_iso(doc)
    assert checked >= 10
    text = flowdesk(*d, "waiting", env=env).stdout
    assert re.search(r"deadline in 23h 5\dm", text), text
    assert "86," not in text
    assert flowdesk(*d, "flows", env=env).stdout.splitlines()[0].split() == [
        "FLOW",
        "VERSION",
        "STEPS",
    ]


def test_export_writes_iso_times_in_private_files(tmp_path):
    db, rid = seeded(tmp_path)
    out = flowdesk("--db", str(db), "export", "--out", str(tmp_path / "x"))
    assert out.returncode == 0, out.stderr
    files = sorted((tmp_path / "x").iterdir())
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    (run,) = json.loads((tmp_path / "x" / "runs.json").read_text())
    assert run["run_id"] == rid and ISO.match(run["created_at"]) and ISO.match(run["updated_at"])
    csv_out = flowdesk("--db", str(db), "export", "--out", str(tmp_path / "c"), "--format", "csv")
    assert csv_out.returncode == 0
    assert re.search(r",\d{4}-\d\d-\d\dT[\d:.]+Z", (tmp_path / "c" / "runs.csv").read_text())


# -- single flight after a kill -------------------------------------------------


@pytest.mark.slow
def test_killed_digest_rerun_resumes_instead_of_duplicating(tmp_path):
    db = tmp_path / "f.db"
    make_corpus(tmp_path / "docs", 1500)
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    cmd = [
        sys.executable,
        "-m",
        "desktop_app.cli",
        "--db",
        str(db),
        "run",
        "digest",
        "--folder",
        str(tmp_path / "docs"),
        "--out",
        str(tmp_path / "o"),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stdout is not None and proc.stderr is not None
    rid = proc.stdout.readline().strip()  # printed before any step runs
    assert RUN_ID.match(rid)
    for line in proc.stderr:  # plain progress lines (not a terminal): "  done/total"
        m = re.match(r"\s+(\d+)/1500", line)
        if m and int(m.group(1)) >= 20:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (row,) = jsonl(flowdesk("--db", str(db), "runs", "--json"))
    assert (row["run_id"], row["status"], row["stored_status"]) == (rid, "interrupted", "running")
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == rid  # the same run, its id first
    assert f"resuming interrupted run {rid}" in again.stderr  # as `runs` shows it
    rows = jsonl(flowdesk("--db", str(db), "runs", "--json"))
    assert [(r["run_id"], r["status"]) for r in rows] == [(rid, "completed")]  # no duplicate
    fresh = subprocess.run([*cmd, "--new"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert fresh.returncode == 0 and fresh.stdout.splitlines()[0] != rid
    assert len(jsonl(flowdesk("--db", str(db), "runs", "--json"))) == 2


def unfinished_twin(db: Path, flow: str, given: dict[str, Any]) -> str:
    """A pending run of a built-in flow holding its input's flow key, as a
    crash right after creating it leaves it; its run id."""
    from desktop_app.bootstrap import open_services
    from desktop_app.config import load_settings
    from desktop_app.flows import builtin_flow_key

    sv = open_services(load_settings(db_path=db))
    try:
        return sv.engine.start(flow, given, flow_key=builtin_flow_key(flow, given))
    finally:
        sv.close()


@pytest.mark.slow
def test_new_replaces_the_unfinished_run_and_a_rerun_resumes_the_new_one(tmp_path):
    """A new user's report: a ``--new`` run killed mid-way was not picked up
    by a plain re-run, which started a third run. ``--new`` now cancels the
    unfinished run and takes its flow key."""
    from desktop_app.flows.digest import check_input

    db, folder, out = tmp_path / "f.db", tmp_path / "docs", tmp_path / "o"
    make_corpus(folder, 1500)
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    old = unfinished_twin(db, "digest", check_input(folder, out).model_dump())
    cmd = [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "run", "digest"]
    cmd += ["--folder", str(folder), "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--new"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stdout is not None and proc.stderr is not None
    rid = proc.stdout.readline().strip()
    assert RUN_ID.match(rid) and rid != old
    said = []
    for line in proc.stderr:
        said.append(line)
        m = re.match(r"\s+(\d+)/1500", line)
        if m and int(m.group(1)) >= 20:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert f"canceled pending run {old} on this input; starting a new run\n" in said
    rows = jsonl(flowdesk("--db", str(db), "runs", "--json"))
    assert {r["run_id"]: r["status"] for r in rows} == {old: "canceled", rid: "interrupted"}
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == rid
    assert f"resuming interrupted run {rid}" in again.stderr
    rows = jsonl(flowdesk("--db", str(db), "runs", "--json"))
    assert {r["run_id"]: r["status"] for r in rows} == {old: "canceled", rid: "completed"}


def test_start_new_replaces_a_waiting_tidy_and_a_plain_start_joins_the_new_one(tmp_path):
    """``start --new`` on a built-in flow replaces its unfinished run also
    when that run waits for an answer; the replaced run says why it ended."""
    db, folder = tmp_path / "f.db", tmp_path / "inbox"
    folder.mkdir()
    (folder / "a.pdf").write_bytes(b"%PDF")
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    given = json.dumps({"folder": str(folder)})
    first = flowdesk("--db", str(db), "start", "tidy", "--input", given)
    old = first.stdout.splitlines()[0]
    assert "waits" in first.stderr  # tidy asks before it moves anything
    new = flowdesk("--db", str(db), "start", "tidy", "--input", given, "--new")
    assert new.returncode == 0, new.stderr
    rid = new.stdout.splitlines()[0]
    assert rid != old
    assert f"canceled waiting run {old} on this input; starting a new run" in new.stderr
    again = flowdesk("--db", str(db), "start", "tidy", "--input", given)
    assert again.stdout.splitlines()[0] == rid
    assert f"run {rid} on this input is waiting already" in again.stderr
    (replaced,) = jsonl(flowdesk("--db", str(db), "show", old, "--json"))
    assert replaced["status"] == "canceled"
    assert replaced["error"] == "replaced by a new run on the same input"
    assert (folder / "a.pdf").exists()  # nothing moved: no one approved


# -- exit codes (README: 0 ok, 1 run failed / Flowdesk error, 2 bad input) ---------

FAILING = """
from pydantic import BaseModel
from desktop_app.flow import FlowBuilder

class S(BaseModel):
    n: int = 0

def boom(s):
    raise RuntimeError("boom")

flow = FlowBuilder("boom", S).step("explode", boom).chain().compile()
"""


def asking_agent_run(db: Path, tmp_path: Path) -> str:
    """An agent run in ``db`` waiting for approval of a ``read_file`` call
    (made with a scripted model server that is gone afterwards)."""
    from tests.chat_server import ChatServer, completion

    notes = tmp_path / "agent-notes"
    notes.mkdir()
    read = completion("", [{"id": "r", "name": "read_file", "args": {"path": "n1"}}])
    with ChatServer() as server:
        server.script = [("json", read)]
        env = {
            "FLOWDESK_MODEL__BASE_URL": server.url,
            "FLOWDESK_MODEL__MODEL": "m",
            "FLOWDESK_FILE_TOOLS__REQUIRE_APPROVAL": '["read_file"]',
        }
        asked = flowdesk("--db", str(db), "ask", "n1?", "--tools", "files", "--folder",
                         str(notes), env=env)  # fmt: skip
        assert asked.returncode == 0, asked.stderr
    rows = jsonl(flowdesk("--db", str(db), "runs", "--json"))
    return next(str(r["run_id"]) for r in rows if r["kind"] == "agent")


def test_every_documented_exit_code(tmp_path):
    db, rid = seeded(tmp_path)
    (tmp_path / "userflows").mkdir()
    (tmp_path / "userflows" / "failing_flow.py").write_text(FAILING)
    env = {
        "FLOWDESK_FLOWS": '["failing_flow:flow", "desktop_app.examples.approval:approval"]',
        "PYTHONPATH": f"{tmp_path / 'userflows'}{os.pathsep}{REPO}",
    }
    d = ["--db", str(db)]
    missing = str(tmp_path / "missing")
    agent_rid = asking_agent_run(db, tmp_path)  # then answered with no model configured
    tidy_dir = tmp_path / "tidy"
    tidy_dir.mkdir()
    (tidy_dir / "a.pdf").write_bytes(b"pdf")
    tidy_rid = flowdesk(*d, "run", "tidy", "--folder", str(tidy_dir), env=env).stdout.split()[0]
    cases: list[tuple[list[str], int, str]] = [
        (["runs"], 0, ""),
        (["show", rid[:8]], 0, ""),
        (["resume", rid[:8]], 0, ""),
        (["waiting"], 0, ""),
        (["flows"], 0, ""),
        (["db", "status"], 0, ""),
        (["watch", rid[:8]], 0, "completed"),
        (["start", "boom"], 1, "boom"),  # a run failed
        (["cancel", rid[:8]], 1, "already completed"),  # a Flowdesk error
        (["show", "ffffffff"], 2, "no run ffffffff"),
        (["resume", "ffffffff"], 2, "no run ffffffff"),
        (["cancel", "ffffffff"], 2, "no run ffffffff"),
        (["answer", "ffffffff", "yes"], 2, "no run ffffffff"),
        (["watch", "ffffffff"], 2, "no run ffffffff"),
        (["start", "nosuchflow"], 2, "registered flows: approval, boom, digest, tidy"),
        (
            ["run", "digest", "--folder", missing, "--out", str(tmp_path / "o2")],
            2,
            "does not exist",
        ),
        (
            ["start", "digest", "--input", json.dumps({"folder": missing, "out": "o"})],
            2,
            "does not exist",
        ),
        (["start", "tidy", "--input", json.dumps({"folder": missing})], 2, "does not exist"),
        (["start", "approval", "--input", "{not json"], 2, "--input is not JSON"),
        (
            ["start", "approval", "--input", '{"oder": "o-1"}'],
            2,
            "did you mean 'order'? Nothing was created.",
        ),
        (["signal", "paid", "o-1", "--payload", "{x"], 2, "--payload is not JSON"),
        (["answer", rid[:8], "{x", "--value-json"], 2, "VALUE is not JSON"),
        (["show"], 2, "the following arguments are required"),
        (["resume", agent_rid[:8]], 1, f"answer it with: flowdesk --db {db} answer"),
        (["answer", agent_rid[:8], "yes"], 2, "no model is configured"),  # a missing setting
        (["answer", tidy_rid[:8], "maybe"], 2, "answer yes or no"),  # not an answer it takes
        (["answer", tidy_rid[:8], "no"], 0, "completed"),
        (["undo", tidy_rid[:8]], 0, "nothing to undo"),  # not bad input: nothing moved
        # a run answered already: a Flowdesk error, as cancel of a finished run
        (["answer", tidy_rid[:8], "yes"], 1, "is completed, not waiting for an answer"),
        (["runs", "--flow", "nosuch"], 2, "no flow named 'nosuch'"),  # an unknown flow name
        (["runs", "--flow", "tdy"], 2, "did you mean 'tidy'?"),
        (["runs", "--flow", "approval"], 0, "no runs"),  # a registered flow with no run yet
    ]
    for args, code, text in cases:
        out = flowdesk(*d, *args, env=env)
        assert out.returncode == code, (args, out.returncode, out.stdout, out.stderr)
        assert text in out.stdout + out.stderr, (args, out.stderr)
    failed = jsonl(flowdesk(*d, "runs", "--json", "--flow", "boom", env=env))
    assert [r["status"] for r in failed] == ["failed"]
    tidies = jsonl(flowdesk(*d, "runs", "--json", "--flow", "tidy", env=env))
    assert [r["run_id"] for r in tidies] == [tidy_rid]  # the missing folder started none
    resumed = flowdesk(*d, "resume", failed[0]["run_id"][:8], env=env)
    assert resumed.returncode == 1 and f"--db {db} resume" in resumed.stderr


def test_database_string_paths_and_urls(tmp_path):
    home = Path(os.environ["HOME"])
    out = flowdesk("--db", "~/tilde.db", "db", "apply")
    assert out.returncode == 0 and (home / "tilde.db").is_file(), out.stderr
    # the shell expands a command line: --db '/x/a$b.db' is that very file, not
    # $b expanded again (a new user's report: it opened another file, or blamed
    # the settings file for an unset variable)
    literal = tmp_path / "a$b.db"
    out = flowdesk("--db", str(literal), "db", "apply", env={**os.environ, "b": "zz"})
    assert out.returncode == 0 and literal.is_file(), out.stderr
    assert not (tmp_path / "azz.db").exists()
    out = flowdesk("--db", str(literal), "runs")
    assert out.returncode == 0, out.stderr
    url = f"sqlite://{tmp_path / 'u.db'}"
    assert flowdesk("--db", url, "db", "apply").returncode == 0 and (tmp_path / "u.db").is_file()
    pg = flowdesk("--db", "postgresql://alice@db.invalid/x", "runs")
    assert pg.returncode != 0  # the PostgreSQL backend (installed here) cannot reach it
    assert "postgresql://alice@db.invalid/x" in pg.stderr  # survives intact
    # in the settings file, $VARS are expanded, and an unset one is named there
    from desktop_app.config import config_file

    config_file().parent.mkdir(parents=True, exist_ok=True)
    config_file().write_text('db_path = "$FLOWDESK_NOT_SET_ANYWHERE/x.db"\n')
    try:
        unset = flowdesk("runs")
        assert unset.returncode == 2 and "FLOWDESK_NOT_SET_ANYWHERE is not set" in unset.stderr
        assert str(config_file()) in unset.stderr
        config_file().write_text('db_path = "$HOME/env.db"\n')
        out = flowdesk("db", "apply")
        assert out.returncode == 0 and (home / "env.db").is_file(), out.stderr
    finally:
        config_file().unlink()


def test_unknown_config_keys_name_the_nearest(tmp_path):
    from desktop_app.config import config_file

    cfg = config_file()  # the default settings file (conftest: under XDG_CONFIG_HOME)
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text('db_pth = "~/x.db"\n[model]\nbse_url = "http://127.0.0.1:1/v1"\n')
    out = flowdesk("runs")
    assert out.returncode == 2
    assert "unknown key 'db_pth' (did you mean 'db_path'?)" in out.stderr
    assert "unknown key 'model.bse_url' (did you mean 'base_url'?)" in out.stderr


def test_one_broken_flow_entry_is_reported_and_the_rest_work(tmp_path):
    db, _ = seeded(tmp_path)
    env = {
        "FLOWDESK_FLOWS": '["no_such_module_xyz:flow", "desktop_app.examples.approval:approval"]'
    }
    d = ["--db", str(db)]
    flows = flowdesk(*d, "flows", env=env)
    assert flows.returncode == 1 and "no_such_module_xyz" in flows.stderr
    names = [line.split()[0] for line in flows.stdout.splitlines()[1:]]
    assert names == ["digest", "tidy", "approval"]
    started = flowdesk(*d, "start", "approval", "--input", '{"order": "o-9"}', env=env)
    assert started.returncode == 0 and "no_such_module_xyz" in started.stderr
    resumed = flowdesk(*d, "resume", "--all", env=env)
    assert resumed.returncode == 0 and "other flows work" in resumed.stderr
    doctor = json.loads(flowdesk(*d, "doctor", "--json", env=env).stdout)
    (check,) = [c for c in doctor["checks"] if c["check"] == "flows"]
    assert check["status"] == "bad" and "no_such_module_xyz" in check["detail"]
    assert doctor["ok"] is False


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file")
def test_doctor_reports_a_read_only_database(tmp_path):
    db, _ = seeded(tmp_path)
    os.chmod(db, 0o400)
    out = flowdesk("--db", str(db), "doctor")
    assert out.returncode == 1 and "BAD  writable" in out.stdout


def complete(line: str, answer: Path) -> list[str]:
    """What the shell would offer for ``line`` (argcomplete's protocol)."""
    flowdesk(
        env={
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_SHELL": "bash",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        }
    )
    return answer.read_text().split()


def test_shell_completion_of_commands_and_run_ids(tmp_path):
    script = flowdesk("completion", "bash")
    assert script.returncode == 0 and "complete" in script.stdout and "flowdesk" in script.stdout
    assert complete("flowdesk wat", tmp_path / "c1") == ["watch"]
    db, rid = seeded(tmp_path)
    assert complete(f"flowdesk --db {db} show {rid[:3]}", tmp_path / "c2") == [rid]


@pytest.mark.slow
def test_a_rerun_while_another_process_executes_the_run_says_so_without_resuming(tmp_path):
    """A new user's report: the second ``run digest`` printed "resuming
    running run …" and then that it ran nothing, and advised waiting for a
    lease to expire, which on one machine nobody needs to."""
    db, folder, out = tmp_path / "f.db", tmp_path / "docs", tmp_path / "o"
    make_corpus(folder, 1500)
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    cmd = [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "run", "digest"]
    cmd += ["--folder", str(folder), "--out", str(out)]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None and first.stderr is not None
        rid = first.stdout.readline().strip()
        for line in first.stderr:
            m = re.match(r"\s+(\d+)/1500", line)
            if m and int(m.group(1)) >= 20:
                break
        # frozen mid-run, alive: it must not finish the 1,500 files before
        # the kill below (a digest that fast ended the run first, and the
        # rerun then started a new one)
        first.send_signal(signal.SIGSTOP)
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert second.returncode == 1 and second.stdout == ""
    assert "resuming" not in second.stderr
    assert f"run {rid} is held by a live process: it is being executed by " in second.stderr
    # frozen by the test: the refusal says so, and how it goes on
    assert (
        f"Its process {first.pid} runs nothing now: it is stopped (SIGSTOP or Ctrl-Z): resume "
        f"it with `kill -CONT {first.pid}` (or `fg` in its shell); if it ends without finishing "
        "the run, the run can be resumed at once."
    ) in second.stderr, second.stderr
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert again.returncode == 0 and again.stdout.splitlines()[0] == rid  # at once, as said
    assert f"resuming interrupted run {rid}" in again.stderr
