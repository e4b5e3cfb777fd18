"""Plain text formatting shared by the screens (no Textual, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def short_id(run_id: str) -> str:
    """The first 8 characters of a run id (what the tables show)."""
    return run_id[:8]


def when(ts: float | None) -> str:
    """UTC epoch seconds as ``YYYY-MM-DD HH:MM:SS`` (``-`` when unknown)."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime(TIME_FORMAT)


def progress(p: tuple[int, int] | None) -> str:
    """``done/total`` or ``-``."""
    return "-" if p is None else f"{p[0]}/{p[1]}"


def plural(n: int, word: str) -> str:
    """``1 run`` / ``2 runs``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
