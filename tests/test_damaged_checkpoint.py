"""A run whose latest checkpoint was changed outside Flowdesk (its bytes no
longer match their checksum) on a real SQLite file: every command that meets
it says so and prints the commands that work on it, each run here exactly as
printed; a replay or fork from an intact earlier revision and a cancel work
without reading the damaged state; and the listings (``waiting``, ``runs``,
``resume --all``) name the damaged run and go on with the others, which stay
answerable."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from pydantic import BaseModel

from tests.cli_support import as_printed, flowdesk
from tests.damaged_flows import FLOWS_ENV

ENV = {"FLOWDESK_FLOWS": FLOWS_ENV}


def _start(db: Path, order: str) -> str:
    out = flowdesk(db, "start", "asker", "--input", json.dumps({"order": order}), env=ENV)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[0]


def _damage(db: Path, run_id: str, revision: int) -> None:
    """Overwrite a checkpoint row's state with malformed JSON, as a person
    with the sqlite3 shell would; its checksum stays as it was."""
    with sqlite3.connect(db) as conn:
        changed = conn.execute(
            """UPDATE checkpoints SET state='{"order": "HACKED"' WHERE run_id=? AND revision=?""",
            (run_id, revision),
        ).rowcount
    conn.close()
    assert changed == 1


def _hints(text: str) -> dict[str, str]:
    """The printed commands, by what they do (``replay``, ``cancel``)."""
    found = {}
    for line in text.splitlines():
        if "flowdesk --db" in line:
            command = line[line.index("flowdesk --db") :]
            found[command.split()[3]] = command
    return found


def _status(db: Path, run_id: str) -> dict:
    out = flowdesk(db, "show", run_id, "--output", "json", env=ENV)
    return {"code": out.returncode, "out": out.stdout, "err": out.stderr}


def _runs(db: Path) -> dict[str, dict]:
    out = flowdesk(db, "runs", "--output", "json", env=ENV)
    assert out.returncode == 0, out.stderr
    return {r["run_id"]: r for r in json.loads(out.stdout)}


def test_every_hint_for_a_damaged_run_works_as_printed_and_the_others_go_on(tmp_path):
    db = tmp_path / "g.db"
    assert flowdesk(db, "db", "apply", env=ENV).returncode == 0
    bad, good = _start(db, "A"), _start(db, "B")
    _damage(db, bad, 1)

    shown = flowdesk(db, "show", bad, env=ENV)
    assert shown.returncode == 1
    assert f"checkpoint of run {bad} revision 1 was changed outside Flowdesk" in shown.stderr
    hints = _hints(shown.stderr)
    assert hints == {
        "replay": f"flowdesk --db {db} replay {bad}:0",
        "cancel": f"flowdesk --db {db} cancel {bad}",
    }

    # the listing names the damaged run and goes on with the healthy one
    waiting = flowdesk(db, "waiting", env=ENV)
    assert waiting.returncode == 0, waiting.stderr
    assert f"run {bad}  flow asker\n  unreadable: checkpoint of run {bad}" in waiting.stdout
    assert f'run {good}  flow asker\n  {good}:approve:0  input: "OK?"' in waiting.stdout
    assert _hints(waiting.stdout) == hints
    listed = json.loads(flowdesk(db, "waiting", "--output", "json", env=ENV).stdout)
    by_id = {r["run_id"]: r for r in listed}
    assert "unreadable" in by_id[bad] and by_id[bad]["waits"] == []
    assert [w["wait_id"] for w in by_id[good]["waits"]] == [f"{good}:approve:0"]

    # fork's own hint (unchanged state: replay) and a real fork, from revision 0
    forked = flowdesk(db, "fork", f"{bad}:0", "--changes", "{}", env=ENV)
    assert forked.returncode == 2
    assert f"`flowdesk --db {db} replay {bad}:0`" in forked.stderr
    replayed = as_printed(hints["replay"], env={**ENV})
    assert replayed.returncode == 0, replayed.stderr
    new = replayed.stdout.splitlines()[0]
    assert f"run {new} waiting" in replayed.stdout
    changed = flowdesk(db, "fork", f"{bad}:0", "--changes", '{"order": "x"}', env=ENV)
    assert changed.returncode == 0, changed.stderr
    fork_id = changed.stdout.splitlines()[0]
    answered = flowdesk(db, "answer", fork_id, "yes", env=ENV)
    assert answered.returncode == 0 and f"run {fork_id} completed" in answered.stdout

    # the cancel, as printed, ends the run without reading its damaged state
    canceled = as_printed(hints["cancel"], env={**ENV})
    assert canceled.returncode == 0, canceled.stderr
    assert f"run {bad} canceled" in canceled.stdout
    row = _runs(db)[bad]
    assert row["status"] == "canceled"
    assert row["error"] == "canceled by user; its checkpoint revision 1 is damaged"
    again = flowdesk(db, "show", bad, env=ENV)
    assert again.returncode == 1 and "The run is canceled" in again.stderr
    assert _hints(again.stderr) == {"replay": hints["replay"]}  # no cancel of an ended run
    assert f"run {bad}" not in flowdesk(db, "waiting", env=ENV).stdout

    # the healthy run was never touched, and is answered
    answered = flowdesk(db, "answer", good, "yes", env=ENV)
    assert answered.returncode == 0, answered.stderr
    assert f"run {good} completed" in answered.stdout
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT state FROM checkpoints WHERE run_id=?", (bad,)).fetchall()
    conn.close()
    assert len(rows) == 2  # no checkpoint appended onto the damaged one


def test_resume_all_names_a_damaged_interrupted_run_and_resumes_the_others(tmp_path):
    db = tmp_path / "g.db"
    assert flowdesk(db, "db", "apply", env=ENV).returncode == 0
    bad, good = _start(db, "A"), _start(db, "B")
    assert flowdesk(db, "answer", good, "yes", env=ENV).returncode == 0
    _damage(db, bad, 1)
    other = _start(db, "C")
    with sqlite3.connect(db) as conn:  # interrupted: running, no process holds it
        conn.execute("UPDATE runs SET status='running', lease_owner=NULL WHERE run_id=?", (bad,))
    conn.close()
    resumed = flowdesk(db, "resume", "--all", env=ENV)
    assert resumed.returncode == 1
    assert f"run {bad} not resumed: checkpoint of run {bad} revision 1" in resumed.stdout
    hints = _hints(resumed.stdout)
    assert set(hints) == {"replay", "cancel"}
    canceled = as_printed(hints["cancel"], env={**ENV})
    assert canceled.returncode == 0, canceled.stderr
    assert _runs(db)[bad]["status"] == "canceled"
    again = flowdesk(db, "resume", "--all", env=ENV)
    assert again.returncode == 0, again.stdout + again.stderr
    assert bad not in again.stdout
    answered = flowdesk(db, "answer", other, "yes", env=ENV)  # the others go on
    assert answered.returncode == 0 and f"run {other} completed" in answered.stdout


# -- the store and the engine, in process -------------------------------------

from desktop_app.errors import CheckpointCorruptError, RunStateError  # noqa: E402
from desktop_app.flow import Engine, FlowBuilder  # noqa: E402
from desktop_app.flow.clock import ManualClock  # noqa: E402
from desktop_app.store.connection import open_connection  # noqa: E402
from desktop_app.store.sqlite.store import open_store  # noqa: E402
from tests.test_mutation_kills_sqlite import _cp, _run  # noqa: E402


def _edit(db: Path, sql: str) -> None:
    conn = open_connection(db)
    try:
        conn.execute(sql)
    finally:
        conn.close()


def test_the_newest_intact_revision_below_the_damage_is_named(db_path):
    db = db_path
    s = open_store(db)
    s.create_run(_run(), _cp("r1", 0, {"n": 0}))
    for rev in range(1, 5):
        s.append(_cp("r1", rev, {"n": rev}))
    s.close()
    _edit(db, "UPDATE checkpoints SET state='{\"n\": 9}' WHERE revision=3")
    s = open_store(db)
    with pytest.raises(CheckpointCorruptError) as err:
        s.latest("r1")  # revision 4 folds the damaged revision 3
    assert (err.value.revision, err.value.readable, err.value.run_status) == (3, 2, "running")
    assert s.get_checkpoint("r1", 2).state == {"n": 2}
    s.close()
    # a damaged snapshot leaves nothing below it to replay from
    _edit(db, "UPDATE checkpoints SET state='{\"n\": 8}' WHERE revision=0")
    s = open_store(db)
    with pytest.raises(CheckpointCorruptError) as err:
        s.latest("r1")
    assert (err.value.revision, err.value.readable) == (0, None)
    assert "cancel the run (no earlier checkpoint of it is intact)" in str(err.value)
    assert s.readable_revision_below("r1", 4) is None
    s.close()


class P(BaseModel):
    seen: list[str] = []


class C(BaseModel):
    answer: str | None = None


def test_cancel_of_a_damaged_parent_cancels_its_children_and_a_replay_reattaches(db_path):
    db = db_path
    kid_flow = FlowBuilder("kid", C).await_input("ask", "answer").compile()
    current: list[Engine] = []

    def start(s: P, ctx) -> dict:
        kid = current[-1].run_child(ctx, "kid", {})
        ctx.interrupt("hold")
        return {"seen": [*s.seen, kid.run_id]}

    parent = FlowBuilder("parent", P).step("start", start).compile()
    current.append(Engine(open_store(db), flows=[kid_flow, parent], clock=ManualClock()))
    res = current[-1].run("parent", P())
    assert res.status == "waiting"
    kid = f"{res.run_id}:start"
    latest = current[-1].store.latest(res.run_id).revision
    current[-1].store.close()
    where = f"run_id='{res.run_id}' AND revision={latest}"
    _edit(db, f"UPDATE checkpoints SET meta='{{}}' WHERE {where}")

    current.append(Engine(open_store(db), flows=[kid_flow, parent], clock=ManualClock()))
    engine = current[-1]
    with pytest.raises(CheckpointCorruptError):
        engine.store.latest(res.run_id)
    replayed = engine.replay(f"{res.run_id}:0")  # the journal of the newest intact revision
    assert replayed.status == "waiting"
    assert engine.store.latest(replayed.run_id).meta["children"]["start"][0]["id"] == kid
    done = engine.resume_with(replayed.run_id, "go")
    assert done.state.seen == [kid]  # reattached: no second child
    assert engine.status(kid).status == "waiting"

    canceled = engine.cancel(res.run_id)
    assert canceled.status == "canceled"
    assert canceled.error == f"canceled by user; its checkpoint revision {latest} is damaged"
    assert engine.status(kid).status == "canceled"  # its live child went with it
    assert engine.store.history(res.run_id)[-1].revision == latest  # nothing appended
    with pytest.raises(RunStateError, match="already canceled"):
        engine.cancel(res.run_id)
    engine.store.close()


def test_the_apps_inbox_lists_the_healthy_question_and_names_the_damaged_run(db_path):
    from desktop_app.app.screens.inbox import _flow_items
    from tests.damaged_flows import Order, asker

    engine = Engine(open_store(db_path), flows=[asker], clock=ManualClock())
    bad = engine.run("asker", Order(order="A")).run_id
    good = engine.run("asker", Order(order="B")).run_id
    engine.store.close()
    _edit(db_path, f"UPDATE checkpoints SET state='{{' WHERE run_id='{bad}' AND revision=1")
    store = open_store(db_path)
    errors: list[str] = []
    items, more = _flow_items(store, errors, None)
    assert [(i.run_id, i.wait_id) for i in items] == [(good, f"{good}:approve:0")]
    assert not more
    assert len(errors) == 1 and errors[0].startswith(f"checkpoint of run {bad} revision 1 was")
    store.close()


def test_the_agent_names_a_damaged_run_once_with_the_commands_that_work(tmp_path):
    import threading

    from tests.cli_support import spawn, stop_agent
    from tests.polling import until

    db = tmp_path / "g.db"
    assert flowdesk(db, "db", "apply", env=ENV).returncode == 0
    bad, good = _start(db, "A"), _start(db, "B")
    _damage(db, bad, 1)
    with sqlite3.connect(db) as conn:  # interrupted: running, no process holds it
        conn.execute("UPDATE runs SET status='running', lease_owner=NULL WHERE run_id=?", (bad,))
    conn.close()
    agent = spawn("--db", str(db), "agent", "--poll", "0.1", env=ENV)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(agent.stderr or ()), daemon=True)
    reader.start()
    try:
        until(lambda: any("cancel it" in ln for ln in list(lines)), "the agent names the run")
    finally:
        stop_agent(agent)
        reader.join(timeout=60)
    said = "".join(lines)
    assert said.count(f"flowdesk agent: run {bad} cannot go on here") == 1, said
    hints = _hints(said)
    assert hints == {
        "replay": f"flowdesk --db {db} replay {bad}:0",
        "cancel": f"flowdesk --db {db} cancel {bad}",
    }
    canceled = as_printed(hints["cancel"], env={**ENV})
    assert canceled.returncode == 0 and f"run {bad} canceled" in canceled.stdout
    answered = flowdesk(db, "answer", good, "yes", env=ENV)  # the other run was left alone
    assert answered.returncode == 0 and f"run {good} completed" in answered.stdout


def test_show_of_a_damaged_run_prints_what_it_can_beside_the_damage(tmp_path):
    """``show`` of a run whose latest checkpoint is damaged still prints
    what the run row, its history and its outbox say (id, flow, status,
    revision, times, context ids, the mail it queued), then the typed error
    and the commands that work on it (exit 1); ``--output json`` the same,
    with ``damaged`` saying what is damaged and what to do."""
    from tests.damaged_flows import SENDER_ENV

    env = {"FLOWDESK_FLOWS": SENDER_ENV}
    db = tmp_path / "g.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    out = flowdesk(db, "start", "sender", "--input", json.dumps({"order": "A"}), env=env)
    assert out.returncode == 0, out.stderr
    rid = out.stdout.splitlines()[0]
    runs = json.loads(flowdesk(db, "runs", "--output", "json", env=env).stdout)
    (row,) = [r for r in runs if r["run_id"] == rid]
    revision = json.loads(flowdesk(db, "show", rid, "--output", "json", env=env).stdout)["revision"]
    _damage(db, rid, revision)

    shown = flowdesk(db, "show", rid, env=env)
    assert shown.returncode == 1
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"run {rid}  flow sender (")
    assert "status waiting · 1 side effect queued (not made yet)" in lines[0]
    assert f"revision {revision} (damaged: its state cannot be read)" in shown.stdout
    assert f"started {row['created_at']}" in shown.stdout
    assert f"context: run_id={rid}, trace_id=" in shown.stdout  # the ids it has
    assert f"outbox: {rid}:queue:0:0  mail  pending" in shown.stdout
    assert f"checkpoints: {revision + 1}" in shown.stdout
    assert shown.stderr.startswith(
        f"flowdesk: checkpoint of run {rid} revision {revision} was changed outside Flowdesk"
    )
    hints = _hints(shown.stderr)
    assert hints == {
        "replay": f"flowdesk --db {db} replay {rid}:{revision - 1}",
        "cancel": f"flowdesk --db {db} cancel {rid}",
    }

    as_json = flowdesk(db, "show", rid, "--output", "json", env=env)
    assert as_json.returncode == 1
    got = json.loads(as_json.stdout)
    assert (got["run_id"], got["flow"], got["status"], got["revision"]) == (
        rid,
        "sender",
        "waiting",
        revision,
    )
    assert got["context"]["run_id"] == rid and got["undelivered"] == 1
    assert [(i["destination"], i["status"]) for i in got["intents"]] == [("mail", "pending")]
    assert got["steps"] is None and got["waits"] is None  # in the damaged checkpoint
    assert f"revision {revision} was changed outside Flowdesk" in got["damaged"]["error"]
    assert got["damaged"]["commands"] == [hints["replay"], hints["cancel"]]

    # the cancel, as printed, ends it and withdraws the mail; show then says so
    canceled = as_printed(hints["cancel"], env=env)
    assert canceled.returncode == 0, canceled.stderr
    after = flowdesk(db, "show", rid, env=env)
    assert after.returncode == 1
    assert "status canceled" in after.stdout.splitlines()[0]
    assert "outbox:" not in after.stdout
    assert _hints(after.stderr) == {"replay": hints["replay"]}
