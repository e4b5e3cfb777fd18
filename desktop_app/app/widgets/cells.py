"""One rule for updating a table cell in place: its column widens when the
new value does not fit, so a live count (``summarize x33,878``) or a
countdown is never cut (Textual's ``DataTable.update_cell`` keeps the
column's width unless told)."""

from __future__ import annotations

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
