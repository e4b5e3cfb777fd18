"""Table cells that are never cut mid-word.

* :func:`update_fitting`: a cell updated in place widens its column when
  the new value does not fit, so a live count (``summarize x33,878``) or a
  countdown is never cut (Textual's ``DataTable.update_cell`` keeps the
  column's width unless told).
* :func:`keep_columns`: on a narrow terminal whole columns are dropped,
  least valuable first, rather than the last ones cut at the edge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey


def update_fitting(
    table: DataTable[Any], row: RowKey | str, column: ColumnKey | str, value: Text
) -> None:
    """Set one cell; widen its column when ``value`` is wider than the column's content."""
    key = ColumnKey(column) if isinstance(column, str) else column
    wider = cell_len(value.plain) > table.columns[key].content_width
    table.update_cell(row, column, value, update_width=wider)


#: cells of padding DataTable puts around each column (one each side)
PADDING = 2
#: cells a vertical scrollbar may take at a table's right edge
SCROLLBAR = 2


def keep_columns(
    widths: Mapping[str, int],
    available: int,
    drop: Sequence[str],
    *,
    elastic: str = "",
    floor: int = 0,
) -> tuple[list[str], int]:
    """The columns to show in ``available`` cells, and the width the
    ``elastic`` column gets: columns are dropped whole, least valuable
    first (the order of ``drop``), until the rest fit, so none is cut
    mid-word. The elastic column (a free text, shown in full elsewhere)
    counts ``floor`` cells (its own width when less) and takes what the
    others leave.

    Args:
        widths: each column's widest value or label, in cells, in column order.
        available: the table's width in cells.
        drop: column keys, least valuable first; the others are always kept.

    Returns:
        ``(kept keys in column order, elastic width)``; the elastic width is
        ``0`` without an elastic column.
    """
    room = available - SCROLLBAR
    kept = list(widths)
    if elastic:
        floor = min(floor, widths[elastic])  # a short text needs no more

    def need(keys: list[str]) -> int:
        return sum((floor if k == elastic else widths[k]) + PADDING for k in keys)

    for key in drop:
        if need(kept) <= room:
            break
        if key in kept:
            kept.remove(key)
    if not elastic or elastic not in kept:
        return kept, 0
    others = need([k for k in kept if k != elastic]) + PADDING
    return kept, max(floor, min(widths[elastic], room - others))


def cut_words(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, cut at a word boundary with ``…``
    when it does not fit (mid-word only when a single word is wider)."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = text[: width - 1]
    space = head.rfind(" ")
    if space >= width // 2:
        head = head[:space]
    return head.rstrip() + "…"


def cut_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, its middle replaced by ``…`` when
    it does not fit (an id keeps its start and its end, where ids that
    share a prefix differ: ``release-candidate-42``)."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    tail = (width - 1) // 2
    head = width - 1 - tail
    return text[:head] + "…" + (text[-tail:] if tail else "")
