"""The storage seam holds: the engine, agents and flows never load a backend,
store/ has no import cycle, records live in one module, and the built-in
domain SQL is portable."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import desktop_app
import desktop_app.store
from desktop_app.store import protocol, records
from tests import import_graph

ROOT = Path(desktop_app.__file__).parent
STORE = Path(desktop_app.store.__file__).parent

#: modules that must work without any SQL library loaded
BACKEND_FREE = [
    "desktop_app.flow",
    "desktop_app.flow.engine",
    "desktop_app.flow.outbox",
    "desktop_app.agent",
    "desktop_app.agent.runtime",
    "desktop_app.flows",
    "desktop_app.store.protocol",
    "desktop_app.store.records",
    "desktop_app.store.memory.store",
    "desktop_app.store.memory.agent_runs",
    "desktop_app.store.conformance",
    "desktop_app.store.statements",
    "desktop_app.store.backend",
    "desktop_app.app.main",  # the app reaches a backend only through bootstrap, when it opens
]


@pytest.mark.parametrize("module", BACKEND_FREE)
def test_importing_loads_no_backend(module):
    code = (
        f"import sys, {module}\n"
        "loaded = sorted(m for m in ('apsw', 'psycopg', 'sqlite3') if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "", f"importing {module} loaded {out.stdout.strip()}"


def test_store_modules_import_each_other_without_a_cycle():
    graph = import_graph.graph(STORE, "desktop_app.store")
    # the walk sees edges
    assert "desktop_app.store.protocol" in graph["desktop_app.store.sqlite.store"]
    assert import_graph.cycle(graph) is None, " -> ".join(import_graph.cycle(graph) or [])


def test_the_cycle_finder_finds_one():
    assert import_graph.cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_engine_agents_and_flows_never_name_a_backend():
    pattern = re.compile(r"\bapsw\b|\bSqlite[A-Z]\w*|\bpsycopg\b|\bPostgres[A-Z]\w*")
    offenders = []
    for folder in ("flow", "agent", "flows"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


def test_every_record_lives_in_records_and_is_re_exported():
    names = [
        "StepRecord", "Wait", "Signal", "Event", "Intent", "Checkpoint", "CheckpointInfo",
        "RunRecord", "Lease", "AgentRun", "ToolResult", "RunStatus", "StepStatus",
        "AgentStatus", "WaitKind",
    ]  # fmt: skip
    for name in names:
        assert getattr(protocol, name) is getattr(records, name), name
    from desktop_app.store.sqlite import agent_runs

    assert agent_runs.AgentRun is records.AgentRun  # old import paths keep working


def test_agent_statuses_map_to_run_statuses_in_one_place():
    assert set(records.AGENT_RUN_STATUS) == set(records.AgentStatus.__args__)  # type: ignore[attr-defined]
    assert set(records.AGENT_RUN_STATUS.values()) <= set(records.RUN_STATUSES)
    assert records.run_status_of_agent("done") == "completed"
    assert records.run_status_of_agent("timeout") == "timed_out"
    assert records.run_status_of_agent("input_required") == "waiting"
    with pytest.raises(ValueError, match="not an agent-run status"):
        records.run_status_of_agent("completed")


def test_lease_carries_its_ttl():
    assert protocol.Lease("a", 130.0, 100.0).ttl == 30.0
    assert protocol.Lease("a", 130.0, float("inf"), ttl_s=30.0).ttl == 30.0


#: SQLite-only forms that a second dialect breaks on
_UNPORTABLE = [
    (re.compile(r"LIMIT\s+-1|\?\s*=\s*-1"), "LIMIT -1"),
    (re.compile(r"last_insert_rowid", re.I), "last_insert_rowid()"),
    (re.compile(r"CROSS JOIN \w+ \w+ ON", re.I), "CROSS JOIN ... ON"),
    (re.compile(r"INSERT OR REPLACE", re.I), "INSERT OR REPLACE"),
    (re.compile(r"\+\s*\(excluded\.\w+\s*=", re.I), "boolean arithmetic"),
    (re.compile(r"DO UPDATE SET[^\"]*?\b(\w+)=\1\s*\+", re.I), "unqualified column in upsert"),
]


@pytest.mark.parametrize(
    "path",
    [
        STORE / "sqlite" / "store.py",
        STORE / "sqlite" / "agent_runs.py",
        *sorted((STORE / "domain").glob("*.py")),
    ],
    ids=lambda p: p.name,
)
def test_store_sql_is_portable(path):
    text = path.read_text()
    found = [what for rx, what in _UNPORTABLE if rx.search(text)]
    assert found == []
    assert ".query(record_outcome" not in text


def test_the_portability_patterns_catch_the_old_forms():
    old = (
        '"times_processed=times_processed+1"  "DO UPDATE SET n=n+1" '
        '"attempts+(excluded.status=\'x\')" "CROSS JOIN runs r ON r.a=w.a" '
        '"LIMIT -1" "last_insert_rowid()"'
    )
    assert {what for rx, what in _UNPORTABLE if rx.search(old)} >= {
        "boolean arithmetic",
        "CROSS JOIN ... ON",
        "LIMIT -1",
        "last_insert_rowid()",
        "unqualified column in upsert",
    }


def test_the_app_and_its_screens_import_each_other_without_a_cycle():
    graph = import_graph.graph(STORE.parent / "app", "desktop_app.app", runtime_only=True)
    assert "desktop_app.app.screens.runs" in graph["desktop_app.app.main"]  # edges are seen
    assert import_graph.cycle(graph) is None, " -> ".join(import_graph.cycle(graph) or [])
