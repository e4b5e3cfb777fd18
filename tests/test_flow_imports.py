"""The modules of desktop_app/flow/ import each other without a cycle.

Every ``import``/``from ... import`` among them counts, also those under
``if TYPE_CHECKING:`` and inside functions: a cycle hidden in a function
body is still a cycle in the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

import desktop_app.flow

FLOW_DIR = Path(desktop_app.flow.__file__).parent
PACKAGE = "desktop_app.flow"


def _module_name(path: Path) -> str:
    return PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"


def _flow_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``path`` imports (package ``__init__`` excluded)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = f"{PACKAGE}.{base}" if base else PACKAGE
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        for name in names:
            if name in known and name != PACKAGE:
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    paths = sorted(FLOW_DIR.glob("*.py"))
    known = {_module_name(p) for p in paths}
    return {_module_name(p): _flow_imports(p, known) for p in paths if p.stem != "__init__"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        color[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if color.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in color and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        color[node] = 2
        return None

    for node in sorted(graph):
        if node not in color and (found := visit(node)) is not None:
            return found
    return None


def test_cycle_finder_sees_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_real_imports() -> None:
    graph = _graph()
    assert f"{PACKAGE}.results" in graph[f"{PACKAGE}.engine"]
    assert f"{PACKAGE}.host" in graph[f"{PACKAGE}.driver"]


def test_no_import_cycle_among_flow_modules() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_public_exports_still_import() -> None:
    from desktop_app.flow import Engine, ResumePendingResult, RunResult
    from desktop_app.flow.engine import IncompatibleRun
    from desktop_app.flow.results import IncompatibleRun as Same

    assert IncompatibleRun is Same
    assert Engine and ResumePendingResult and RunResult
