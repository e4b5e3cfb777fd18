"""Whether the SQLite file the app opened is still the one at its path.

The app keeps its database file open. Moved (``mv``), deleted (``rm``) or
replaced by another file at that path, the file stays open and writable: the
app would go on writing into a file that is no longer at the path (deleted:
lost at quit) while its header still shows the path. :class:`OpenedFile`
remembers the file's identity (``st_dev``, ``st_ino``) when it was opened and
compares the path's with it, one ``os.stat`` per look (the app's poll). A
PostgreSQL database has no file: :func:`opened_file` gives ``None`` for it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Literal

from desktop_app.errors import FlowdeskError

#: how the path changed: no file there, or another file
Change = Literal["gone", "replaced"]


def _identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file at ``path``, ``None`` when nothing is there.

    Raises:
        OSError: the path cannot be looked at (permissions): no answer either way.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_dev, st.st_ino


class OpenedFile:
    """The database file the app opened, at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: the file's identity when opened (``None``: it could not be looked at)
        self._opened: tuple[int, int] | None = None
        with contextlib.suppress(OSError):
            self._opened = _identity(path)

    def change(self) -> Change | None:
        """How the path no longer names the file opened: ``"gone"`` (nothing
        there: moved or deleted), ``"replaced"`` (another file there), or
        ``None`` (still that file, or it cannot be told)."""
        if self._opened is None:
            return None
        try:
            now = _identity(self.path)
        except OSError:
            return None
        if now is None:
            return "gone"
        return None if now == self._opened else "replaced"


def opened_file(db_path: str) -> OpenedFile | None:
    """The file ``db_path`` opened (call right after opening it); ``None``
    for a PostgreSQL database."""
    from desktop_app.bootstrap import parse_database

    try:
        db = parse_database(db_path)
    except FlowdeskError:
        return None
    return OpenedFile(db.path) if db.backend == "sqlite" else None


def file_notice(path: Path, change: Change) -> str:
    """What the banner says while the file at ``path`` is not the one the app
    opened: what happened, that nothing is written any more, what to do."""
    if change == "gone":
        what = f"The database file {path} is gone (moved or deleted) since the app opened it"
        todo = (
            f"Put it back at {path} to go on here, or quit (q) and start Flowdesk with --db "
            "naming where it is now."
        )
    else:
        what = f"The database file {path} was replaced by another file since the app opened it"
        todo = (
            f"Put the original back at {path} to go on here, or quit (q) and start Flowdesk "
            "again to open the file now there."
        )
    return (
        f"{what}: the app still has the old file open, and what it wrote there would not be "
        f"at that path. From now on it starts nothing that writes: answering, starting, "
        f"resuming, canceling and signals are refused, and timers and deliveries stop. {todo}"
    )
