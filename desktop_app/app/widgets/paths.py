"""Folder completion for the path fields of the start forms: typing
``~/no`` suggests ``~/notes/`` (the rest shown dim; right arrow or end
takes it), as a shell's Tab would (Textual's ``Suggester``)."""

from __future__ import annotations

import os
from pathlib import Path

from textual.suggester import Suggester

#: folders listed per suggestion, at most (a huge folder is not read in full)
SCAN_LIMIT = 2000


def complete_folder(text: str) -> str | None:
    """The first folder (sorted by name, hidden ones only when the typed
    part starts with a dot) whose path begins with ``text``, as ``text``
    extended to it with a trailing ``/``; ``None`` when none does.
    ``~`` stays as typed."""
    if not text:
        return None
    head, _, part = text.rpartition("/")
    parent = Path(os.path.expanduser(head or ("/" if text.startswith("/") else ".")))
    if text.startswith("/") and not head:
        parent = Path("/")
    try:
        names = []
        with os.scandir(parent) as entries:
            for i, entry in enumerate(entries):
                if i >= SCAN_LIMIT:
                    break
                if entry.name.startswith(part) and entry.is_dir():
                    if entry.name.startswith(".") and not part.startswith("."):
                        continue
                    names.append(entry.name)
    except OSError:
        return None
    if not names:
        return None
    name = sorted(names)[0]
    prefix = f"{head}/" if head or text.startswith("/") else ""
    return f"{prefix}{name}/"


class FolderSuggester(Suggester):
    """Suggests the first folder whose path starts with what was typed."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)

    async def get_suggestion(self, value: str) -> str | None:
        suggestion = complete_folder(value)
        return suggestion if suggestion != value else None
