"""A text drawing of a compiled flow: steps in order from the entry, their
kinds, routes and parallel branches, and where a run is (no Textual here).

Each step is one line, in breadth-first order from the entry::

    ● scan            step
    ⟲ summarize       loop            ◀ next
    ● report          step            → end

Marks: ``✔`` done (the run passed it), ``◀ next`` (in the run's frontier),
``⏸`` waits there now.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from rich.text import Text

from desktop_app.flow import CompiledFlow

#: Symbol of each step kind.
KIND_MARKS = {
    "function": "●",
    "loop": "⟲",
    "parallel": "⫴",
    "condition": "◇",
    "await": "?",
    "wait": "⧗",
}


def step_order(flow: CompiledFlow[Any]) -> list[str]:
    """Step ids breadth-first from the entry (then any not reached, sorted)."""
    seen: list[str] = []
    queue = deque([flow.entry])
    while queue:
        sid = queue.popleft()
        if sid in seen or sid not in flow.steps:
            continue
        seen.append(sid)
        route = flow.routes.get(sid)
        queue.extend(route.targets if route is not None else flow.edges.get(sid, ()))
    return seen + sorted(set(flow.steps) - set(seen))


def graph_text(
    flow: CompiledFlow[Any],
    *,
    done: Iterable[str] = (),
    frontier: Iterable[str] = (),
    waiting: Iterable[str] = (),
) -> Text:
    """The drawing (see the module docstring); ``done``, ``frontier`` and
    ``waiting`` are step ids of a run (from its latest checkpoint)."""
    done_ids, next_ids, wait_ids = set(done), set(frontier), set(waiting)
    order = step_order(flow)
    width = max((len(s) for s in order), default=4) + 2
    text = Text()
    text.append(f"{flow.name}", style="bold")
    text.append(f"  version {flow.version}\n", style="dim")
    if flow.description:
        text.append(flow.description + "\n", style="italic")
    text.append("\n")
    for sid in order:
        step = flow.steps[sid]
        kind = str(getattr(step, "kind", "function"))
        here = sid in next_ids or sid in wait_ids
        style = "bold green" if here else ("dim" if sid in done_ids else "")
        text.append(f" {KIND_MARKS.get(kind, '●')} ", style=style)
        text.append(sid.ljust(width), style=style)
        text.append(kind.ljust(10), style="dim")
        if kind == "parallel":
            branches = [name for name, _fn in getattr(step, "branches", ())]
            text.append(" branches: " + ", ".join(branches))
        route = flow.routes.get(sid)
        if route is not None:
            text.append(" route → " + " | ".join(route.targets))
        else:
            nxt = flow.edges.get(sid, ())
            if sid in flow.finish or not nxt:
                text.append(" → end", style="dim")
            elif len(nxt) > 1 or (nxt and order.index(nxt[0]) != order.index(sid) + 1):
                text.append(" → " + ", ".join(nxt))
        if sid in wait_ids:
            text.append("  ⏸ waits here", style="bold yellow")
        elif sid in next_ids:
            text.append("  ◀ next", style="bold green")
        elif sid in done_ids:
            text.append("  ✔", style="green")
        text.append("\n")
    return text
