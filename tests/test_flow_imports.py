"""The modules of desktop_app/flow/ import each other without a cycle.

Every ``import``/``from ... import`` among them counts, also those under
``if TYPE_CHECKING:`` and inside functions: a cycle hidden in a function
body is still a cycle in the design.
"""

from __future__ import annotations

from pathlib import Path

import desktop_app.flow
from tests.import_graph import cycle, graph

FLOW_DIR = Path(desktop_app.flow.__file__).parent
PACKAGE = "desktop_app.flow"


def _graph() -> dict[str, set[str]]:
    return graph(FLOW_DIR, PACKAGE)


def test_cycle_finder_sees_a_cycle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_real_imports() -> None:
    graph = _graph()
    assert f"{PACKAGE}.results" in graph[f"{PACKAGE}.engine"]
    assert f"{PACKAGE}.host" in graph[f"{PACKAGE}.driver"]


def test_no_import_cycle_among_flow_modules() -> None:
    found = cycle(_graph())
    assert found is None, "import cycle: " + " -> ".join(found or [])


def test_public_exports_still_import() -> None:
    from desktop_app.flow import Engine, ResumePendingResult, RunResult
    from desktop_app.flow.engine import IncompatibleRun
    from desktop_app.flow.results import IncompatibleRun as Same

    assert IncompatibleRun is Same
    assert Engine and ResumePendingResult and RunResult


#: the run core's parts split out of the driver and the engine: each is used
#: by them and never reaches back into them
RUN_CORE_PARTS = (
    "run",
    "wait_kinds",
    "composite",
    "step_call",
    "waiting",
    "answers",
    "recovery",
    "replay",
    "pool",
)


def test_the_run_cores_parts_import_neither_the_driver_nor_the_engine() -> None:
    graph = _graph()
    for part in RUN_CORE_PARTS:
        reached = reachable(graph, f"{PACKAGE}.{part}")
        assert not reached & {f"{PACKAGE}.driver", f"{PACKAGE}.engine"}, (part, sorted(reached))
    assert {f"{PACKAGE}.waiting", f"{PACKAGE}.composite"} <= graph[f"{PACKAGE}.driver"]
    assert f"{PACKAGE}.wait_kinds" in graph[f"{PACKAGE}.waiting"]
    parts = {f"{PACKAGE}.{p}" for p in ("run", "answers", "recovery", "replay", "pool")}
    assert parts <= graph[f"{PACKAGE}.engine"]


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), set()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen
