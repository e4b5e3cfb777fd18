"""The app's tables: read row by row."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable


class RowTable(DataTable[Text]):
    """A :class:`~textual.widgets.DataTable` whose cursor is a row, with
    zebra stripes, where Home and End go to the first and the last row.

    DataTable's own Home and End scroll sideways, to the first and the last
    column, which a row cursor never selects (a new user pressed End in the
    help and nothing moved); Ctrl+Home and Ctrl+End still do what they do
    there.
    """

    BINDINGS = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]

    def __init__(self, *, id: str | None = None, **kwargs: Any) -> None:
        """``kwargs``: DataTable's other options (``cursor_type`` and
        ``zebra_stripes`` are set here)."""
        super().__init__(id=id, cursor_type="row", zebra_stripes=True, **kwargs)
