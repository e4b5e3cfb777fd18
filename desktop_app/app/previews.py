"""Previews the app attaches to a flow's question, and the undo of a tidy run.

A preview is a small table shown with a question (what answering yes will
do). :data:`PREVIEWS` maps a flow name to the function that builds it from
the store; a flow without one shows its question alone. No Textual here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from desktop_app.errors import InputError
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


@dataclass(frozen=True)
class UndoReport:
    """What :func:`undo_tidy` did: files moved back and files left (with why)."""

    moved_back: int
    left: list[str]


def undo_tidy(undo_list: Path) -> UndoReport:
    """Move a tidy run's files back, from its undo list (``[{"from", "to"}]``).

    A file is moved back only when it is still where tidy put it and its old
    place is free, so running this twice changes nothing the second time.
    Folders tidy created are left (they may hold other files).

    Raises:
        InputError: the undo list is missing or is not a tidy undo list.
    """
    try:
        entries = json.loads(undo_list.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"the undo list {undo_list} does not exist; nothing to undo") from exc
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the undo list {undo_list}: {exc}") from exc
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("from"), str) and isinstance(e.get("to"), str)
        for e in entries
    ):
        raise InputError(f"{undo_list} is not a tidy undo list (a list of from/to pairs)")
    moved, left = 0, []
    for entry in entries:
        src, dst = Path(entry["from"]), Path(entry["to"])
        if not os.path.lexists(src):
            left.append(f"{src.name}: no longer at {src.parent}")
        elif os.path.lexists(dst):
            left.append(f"{src.name}: {dst} is taken")
        else:
            try:
                os.rename(src, dst)
            except OSError as exc:
                left.append(f"{src.name}: {exc.strerror or exc}")
            else:
                moved += 1
    return UndoReport(moved, left)
