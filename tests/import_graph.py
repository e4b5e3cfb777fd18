"""The import graph of a package's modules, and a cycle finder over it (shared
by the import-cycle tests); and the modules a real process loads
(:func:`loaded_modules`, for the start-up tests).

Every ``import``/``from ... import`` among the modules counts, also those
inside functions (a cycle hidden in a function body is still a cycle in the
design) and, unless ``runtime_only``, those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def imports(path: Path, package: str, known: set[str], *, runtime_only: bool = False) -> set[str]:
    """The modules of ``known`` that the file ``path`` (in ``package``) imports;
    with ``runtime_only``, leaving out imports under ``if TYPE_CHECKING:``
    (type names only: not a runtime edge)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
                node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = f"{package}.{base}" if base else package
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        found |= {n for n in names if n in known}
    return found


def graph(folder: Path, package: str, *, runtime_only: bool = False) -> dict[str, set[str]]:
    """Module name -> the modules of the package it imports, for every ``.py``
    file below ``folder`` (the package ``package``). The package itself (its
    ``__init__``) is a node but never a target."""
    paths = sorted(folder.rglob("*.py"))

    def name(p: Path) -> str:
        rel = p.relative_to(folder).with_suffix("")
        parts = [package, *rel.parts]
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    known = {name(p) for p in paths} - {package}
    return {
        name(p): imports(p, package, known, runtime_only=runtime_only) - {name(p)} for p in paths
    }


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a list of nodes (first == last), or None."""
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        color[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if color.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in color and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        color[node] = 2
        return None

    for node in sorted(edges):
        if node not in color and (found := visit(node)) is not None:
            return found
    return None


#: runs ``python -m MODULE ARGS...`` (argv[1], argv[2:]) and, as it leaves
#: (also by ``os._exit``, as argcomplete does), writes the names in
#: ``sys.modules`` to stderr after a marker line
_RECORDER = """
import atexit, os, runpy, sys
def dump():
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(2, ("\\n--- modules ---\\n" + "\\n".join(sorted(sys.modules))).encode())
real_exit = os._exit
def _exit(code):
    dump()
    real_exit(code)
os._exit = _exit
atexit.register(dump)
module, sys.argv = sys.argv[1], ["flowdesk", *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def loaded_modules(
    module: str, args: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """Every module in ``sys.modules`` when ``python -m MODULE ARGS...`` (run
    from this checkout, ``env`` over this process's environment) leaves, also
    by ``os._exit`` as argcomplete does, and also those imported with
    ``importlib.import_module`` (which ``-X importtime`` does not log).
    Returns the names and the finished process (its stderr without the list)."""
    done = subprocess.run(
        [sys.executable, "-c", _RECORDER, module, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    done.stderr, _, names = done.stderr.rpartition("\n--- modules ---\n")
    return set(names.splitlines()), done
