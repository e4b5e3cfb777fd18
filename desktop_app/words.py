"""Counts in words: ``1 file``, ``2,941 files`` (never ``1 files`` nor ``file(s)``)."""

from __future__ import annotations


def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` with the noun that fits it: ``plural(1, "file")`` is ``"1 file"``,
    ``plural(2941, "file")`` ``"2,941 files"``; ``many`` when the plural is not
    ``one + "s"`` (``plural(2, "entry", "entries")``)."""
    return f"{n:,} {one if n == 1 else (many if many is not None else one + 's')}"
