"""One-line status and error banners shown above the tables."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class StatusLine(Static):
    """What the app is doing (opening the database, resuming runs, ...)."""

    DEFAULT_CSS = """
    StatusLine {
        height: auto;
        padding: 0 1;
        color: $text-muted;
    }
    """

    def say(self, message: str) -> None:
        self.update(Text(message))


class ErrorBanner(Static):
    """A visible error that stays until the problem is fixed (hidden when empty)."""

    DEFAULT_CSS = """
    ErrorBanner {
        display: none;
        height: auto;
        padding: 0 1;
        background: $error;
        color: $text;
    }
    ErrorBanner.-visible {
        display: block;
    }
    """

    def show_error(self, message: str | None) -> None:
        self.message = message or ""
        self.update(Text(self.message))
        self.set_class(bool(message), "-visible")

    message: str = ""
