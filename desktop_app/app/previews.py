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

from desktop_app.flows.tidy_outcomes import run_outcomes
from desktop_app.store.domain.tidy import moves_of_run
from desktop_app.store.protocol import CheckpointStore
from desktop_app.textsafe import one_line
from desktop_app.words import plural


@dataclass(frozen=True)
class Preview:
    """A table shown with a question: ``columns`` and ``rows`` of text.

    ``wrap``: the index of the column whose text wraps in the width the
    other columns leave (a long reason shows in full), or ``None``.
    ``shrink``: the indexes of columns that wrap too when the row would not
    fit the dialog otherwise (a long file name: at 80 columns it took the
    whole width and pushed ``wrap``'s column out of sight).
    """

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)
    wrap: int | None = None
    shrink: tuple[int, ...] = ()


#: ``tidy_moves`` statuses of a file that moves (or moved) when approved
MOVING = ("planned", "queued", "moved")


def tidy_preview(store: CheckpointStore, run_id: str) -> Preview:
    """The files a tidy run planned, each listed: its outcome (an
    :data:`~desktop_app.flows.tidy_outcomes.OUTCOMES` key, the words
    ``flowdesk show`` and ``answer`` use), and where it moves, or that it
    stays and why (in full). The title counts the rows it lists:
    ``"6 files: 4 to move, 2 stay"``."""
    moves = store.query(moves_of_run(run_id))
    rows: list[tuple[str, ...]] = []
    for m, o in zip(moves, run_outcomes(store, run_id, moves), strict=True):
        folder = str(Path(m.src).parent)
        goes = m.status in MOVING and m.dst is not None
        where = os.path.relpath(m.dst, folder) if goes and m.dst else f"stays: {m.reason}"
        name = one_line(Path(m.src).name)  # a newline in it would split its row
        rows.append((name, m.kind, o.outcome, where))
    moving = sum(m.status in MOVING and m.dst is not None for m in moves)
    title = f"{plural(len(rows), 'file')}: {moving:,} to move"
    if len(rows) > moving:
        title += f", {plural(len(rows) - moving, 'stays', 'stay')}"
    # Status before the wrapping Moves to: sized to its content, it is never
    # the column cut at the dialog's edge ("planne" showed at 100 columns)
    return Preview(title, ("File", "Kind", "Status", "Moves to"), rows, wrap=3, shrink=(0,))


#: flow name -> the preview of its question (read in a worker).
PREVIEWS: dict[str, Callable[[CheckpointStore, str], Preview]] = {"tidy": tidy_preview}
