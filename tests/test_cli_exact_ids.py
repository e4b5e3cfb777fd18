"""An exact id wins over a prefix match of another kind, everywhere the
CLI takes a run id: a LangGraph thread named ``8c09`` (its program chose
the name) is answered and shown by ``8c09`` although a Flowdesk agent run's
id starts with ``8c09``; ``waiting``'s printed command answers the thread,
run exactly as printed; a prefix several ids start with names them all.

Real things: a SQLite file, a LangGraph graph checkpointed by
``FlowdeskSaver``, the real ``flowdesk`` command in processes of its own."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from desktop_app.errors import AmbiguousRunIdError
from desktop_app.store.runids import RunRef, resolve_run_id
from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import as_printed, flowdesk

AGENT_RUN = "8c09d34e5b6a47f1a0c2e9d8b7f6a5c4"


def _waiting_thread(db: Path, tmp_path: Path, thread_id: str) -> None:
    """A LangGraph thread ``thread_id`` waiting on its ``interrupt()``."""
    pytest.importorskip("langgraph")
    from desktop_app.integrations.langgraph import FlowdeskSaver
    from tests.langgraph_worker import build_graph

    with FlowdeskSaver.open(db) as saver:
        graph = build_graph(str(tmp_path / "counts.txt")).compile(checkpointer=saver)
        out = graph.invoke({"topic": "t"}, {"configurable": {"thread_id": thread_id}})
        assert out["__interrupt__"]


def _done_agent_run(db: Path, run_id: str) -> None:
    store = open_store(db)
    try:
        SqliteAgentStore(store).create(
            AgentRun(run_id, "notes", "done", "hi", 1000.0, 1000.0),
            [{"role": "user", "content": "hi"}],
        )
    finally:
        store.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    db = tmp_path / "a.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    _waiting_thread(db, tmp_path, "8c09")
    _done_agent_run(db, AGENT_RUN)
    return db


def test_the_answer_command_waiting_prints_answers_the_thread_as_printed(db: Path) -> None:
    listed = flowdesk(db, "waiting")
    assert listed.returncode == 0, listed.stderr
    (hint,) = re.findall(
        r"answer it \(the answer on standard input\): (flowdesk .*)", listed.stdout
    )
    assert hint.startswith(f"flowdesk --db {shlex.quote(str(db))} answer 8c09 - --wait-id "), hint
    done = as_printed(hint, {**os.environ}, input="yes\n")
    assert done.returncode == 0, done.stderr
    assert "langgraph thread 8c09 answered" in done.stdout
    shown = flowdesk(db, "show", "8c09")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("langgraph thread 8c09  status answered")
    # the agent run is still reached by a longer prefix, and by its id
    for given in (AGENT_RUN[:8], AGENT_RUN):
        agent = flowdesk(db, "show", given)
        assert agent.returncode == 0 and AGENT_RUN in agent.stdout, agent.stderr
        assert "langgraph thread" not in agent.stdout


def test_a_thread_id_with_spaces_and_quotes_is_answered_as_printed(
    db: Path, tmp_path: Path
) -> None:
    _waiting_thread(db, tmp_path, "order 7's $check")
    listed = flowdesk(db, "waiting")
    hints = re.findall(r"answer it \(the answer on standard input\): (flowdesk .*)", listed.stdout)
    (hint,) = [h for h in hints if "order" in h]
    done = as_printed(hint, {**os.environ}, input="yes\n")
    assert done.returncode == 0, done.stderr
    assert "langgraph thread order 7's $check answered" in done.stdout


def test_a_prefix_of_a_run_and_a_thread_names_both(db: Path, tmp_path: Path) -> None:
    _waiting_thread(db, tmp_path, "8c09d34e-review")
    shown = flowdesk(db, "show", "8c09d34e")
    assert shown.returncode == 2
    assert (
        "run id prefix '8c09d34e' matches 2 runs "
        f"(8c09d34e-review (langgraph), {AGENT_RUN} (agent)); give more characters"
    ) in shown.stderr
    answered = flowdesk(db, "answer", "8c09d34e", "yes")
    assert answered.returncode == 2 and "matches 2 runs" in answered.stderr
    # each is reached by its own id
    assert flowdesk(db, "show", "8c09d34e-review").stdout.startswith(
        "langgraph thread 8c09d34e-review  status waiting"
    )


class _Threads:
    def __init__(self, *ids: str) -> None:
        self._ids = list(ids)

    def exists(self, thread_id: str) -> bool:
        return thread_id in self._ids

    def ids(self) -> list[str]:
        return list(self._ids)


def test_exact_ids_of_any_kind_win_over_prefixes(db_path: Path) -> None:
    from desktop_app.store.protocol import Checkpoint, RunRecord

    store = open_store(db_path)
    try:
        store.create_run(
            RunRecord("f00dcafe0001", "f", "v1", "completed", 0, 1000.0, 1000.0, scope=store.scope),
            Checkpoint("f00dcafe0001", 0, "completed", {}, {}, (), 1000.0),
        )
        agents = SqliteAgentStore(store)
        threads = _Threads("f00d", "beef", "f00dcafe0001")
        assert resolve_run_id(store, agents, "f00d", threads) == RunRef("f00d", "langgraph")
        # a flow run's exact id is that run (a thread of the same id is reached by no prefix)
        assert resolve_run_id(store, agents, "f00dcafe0001", threads) == RunRef(
            "f00dcafe0001", "flow"
        )
        with pytest.raises(AmbiguousRunIdError) as err:
            resolve_run_id(store, agents, "f00dc", threads)
        assert err.value.matches == ["f00dcafe0001 (flow)", "f00dcafe0001 (langgraph)"]
        assert resolve_run_id(store, agents, "f00dc") == RunRef("f00dcafe0001", "flow")
    finally:
        store.close()


@pytest.mark.parametrize("command", [["show"], ["answer", "{}", "yes"], ["cancel"], ["resume"]])
def test_an_empty_run_id_is_refused_as_empty(tmp_path: Path, command: list[str]) -> None:
    """A tryout: ``show ''`` said "no run  in scope 'default'" (the id left a
    double space) with a note on scopes. An empty or blank id is refused as
    such, exit 2, before any lookup."""
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    verb, *rest = command
    args = [verb, *(a.replace("{}", "  ") for a in rest)] if rest else [verb, ""]
    got = flowdesk(db, *args)
    assert got.returncode == 2, got.stderr
    assert got.stderr.strip() == (
        "flowdesk: the run id is empty: give a run id, or at least 4 characters of one"
    )
