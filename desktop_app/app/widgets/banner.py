"""One-line status and error banners shown above the tables."""

from __future__ import annotations

from rich.text import Text
from textual.timer import Timer
from textual.widgets import Static


class StatusLine(Static):
    """What the app is doing (opening the database, resuming runs, ...).

    A message given ``for_s`` disappears after that many seconds (unless
    another message replaced it first); the line is hidden while empty.
    """

    DEFAULT_CSS = """
    StatusLine {
        height: auto;
        padding: 0 1;
        color: $text-muted;
    }
    StatusLine.-empty {
        display: none;
    }
    """

    message: str = ""
    _expiry: Timer | None = None

    def say(self, message: str, *, for_s: float | None = None) -> None:
        if self._expiry is not None:
            self._expiry.stop()
            self._expiry = None
        self.message = message
        self.update(Text(message))
        self.set_class(not message, "-empty")
        if message and for_s is not None:
            self._expiry = self.set_timer(for_s, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        self.say("")


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
