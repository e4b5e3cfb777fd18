"""Previews the app attaches to a flow's question.

A preview is a small table shown with a question (what answering yes will
do). :data:`PREVIEWS` maps a flow name to the function that builds it from
the store; a flow without one shows its question alone. No Textual here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from desktop_app.store.domain.tidy import moves_of_run
from desktop_app.store.protocol import CheckpointStore


@dataclass(frozen=True)
class Preview:
    """A table shown with a question: ``columns`` and ``rows`` of text."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)


def tidy_preview(store: CheckpointStore, run_id: str) -> Preview:
    """The moves a tidy run plans (file, kind, where it goes; skipped files say why)."""
    moves = store.query(moves_of_run(run_id))
    rows: list[tuple[str, ...]] = []
    for m in moves:
        folder = str(Path(m.src).parent)
        where = os.path.relpath(m.dst, folder) if m.dst is not None else f"stays ({m.reason})"
        rows.append((Path(m.src).name, m.kind, where, m.status))
    planned = sum(m.dst is not None for m in moves)
    title = f"{planned} planned move{'s' if planned != 1 else ''}"
    return Preview(title, ("File", "Kind", "Moves to", "Status"), rows)


#: flow name -> the preview of its question (read in a worker).
PREVIEWS: dict[str, Callable[[CheckpointStore, str], Preview]] = {"tidy": tidy_preview}
