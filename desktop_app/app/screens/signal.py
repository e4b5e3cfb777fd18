"""Send a signal (name + key + JSON payload) from the app.

A key may hold characters a one-line field cannot show or keep (newline,
tab, ESC, U+202E): the key field holds it in an escaped form
(:func:`escape_key`: ``\\n``, ``\\t``, ``\\xNN``, ``\\uNNNN``,
``\\UNNNNNNNN``, ``\\\\`` for a backslash) that :func:`unescape_key` reads
back to exactly the key; the prefilled key of a waiting run is sent as it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from desktop_app.app.screens.help import HELP_BINDING
from desktop_app.app.widgets.bars import Footer


@dataclass(frozen=True)
class SignalRequest:
    """What the user wants to send: ``payload`` is parsed JSON."""

    name: str
    key: str
    payload: Any


_SHORT = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNSHORT = {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
#: one escape of the key field: ``\\``, ``\\n``, ``\\t``, ``\\r``,
#: ``\\xNN``, ``\\uNNNN``, ``\\UNNNNNNNN`` (or a lone backslash: an error)
_ESCAPE = re.compile(
    r"\\(?:([\\ntr])|x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.?))", re.DOTALL
)


def escape_key(key: str) -> str:
    """``key`` as the key field shows it: every character that is not
    printable, a space at either end, and the backslash written as an
    escape (``o-1\\n``, ``\\x1b``, ``\\u202e``, ``\\\\``); a printable
    key without backslashes or outer spaces comes back unchanged.
    :func:`unescape_key` reads the result back to ``key``."""

    def one(i: int, c: str) -> str:
        if c in _SHORT:
            return _SHORT[c]
        if c.isprintable() and not (c == " " and (i == 0 or i == len(key) - 1)):
            return c
        code = ord(c)
        return (
            f"\\x{code:02x}"
            if code < 0x100
            else f"\\u{code:04x}"
            if code < 0x10000
            else f"\\U{code:08x}"
        )

    return "".join(one(i, c) for i, c in enumerate(key))


def unescape_key(text: str) -> str:
    """The key written as :func:`escape_key` writes it.

    Raises:
        ValueError: a backslash starts no known escape (the message says
            where, and how to write a backslash).
    """

    def one(m: re.Match[str]) -> str:
        short, x, u, big, bad = m.groups()
        if short is not None:
            return _UNSHORT[short]
        digits = x or u or big
        if digits is not None:
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise ValueError(f"\\U{big} at column {m.start() + 1} is no character")
            return chr(code)
        shown = f"\\{bad}" if bad else "\\ at the end"
        raise ValueError(
            f"{shown} at column {m.start() + 1} is no escape the key knows "
            "(\\n \\t \\r \\xNN \\uNNNN \\UNNNNNNNN; \\\\ for a backslash)"
        )

    return _ESCAPE.sub(one, text)


def parse_signal(name: str, key: str, payload: str) -> SignalRequest | str:
    """A request, or the message explaining what is wrong (shown in the form).
    ``key`` is the key field's text (escaped: :func:`unescape_key`); the
    name and the spaces typed around the key are stripped (a key's own
    spaces at either end are written ``\\x20``, and kept)."""
    if not name.strip() or not key.strip():
        return "Give the signal's name and key (a waiting run shows both)."
    try:
        exact_key = unescape_key(key.strip(" "))
    except ValueError as exc:
        return f"The key is not readable: {exc}."
    text = payload.strip() or "null"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"The payload is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
    return SignalRequest(name.strip(), exact_key, value)


class SignalScreen(ModalScreen[SignalRequest | None]):
    """A form: signal name, key and JSON payload; dismisses with the request."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), HELP_BINDING]

    def __init__(self, name: str = "", key: str = "", *, waiting: str = "") -> None:
        """``name``/``key`` prefill the form (from the selected run's signal
        wait; the key is shown escaped, :func:`escape_key`); ``waiting`` says
        which run waits for it."""
        super().__init__()
        self.prefill_name = name
        self.prefill_key = key
        self.waiting = waiting

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text("Send a signal", style="bold"))
            if self.waiting:
                yield Static(Text(self.waiting, style="italic"), id="waiting")
            yield Label("Name")
            yield Input(self.prefill_name, placeholder="payment", id="name")
            yield Label("Key (escapes: \\n \\t \\xNN \\uNNNN; \\\\ for a backslash)")
            yield Input(escape_key(self.prefill_key), placeholder="order-42", id="key")
            yield Label("Payload (JSON, empty for null)")
            yield Input(placeholder='{"amount": 12}', id="payload")
            yield Static("", id="error")
            with Horizontal(id="buttons"):
                yield Button("Send", variant="primary", id="send")
                yield Button("Cancel", id="cancel")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        if self.prefill_name and self.prefill_key:
            self.query_one("#payload", Input).focus()

    def _submit(self) -> None:
        result = parse_signal(
            self.query_one("#name", Input).value,
            self.query_one("#key", Input).value,
            self.query_one("#payload", Input).value,
        )
        if isinstance(result, str):
            self.query_one("#error", Static).update(Text(result))
            return
        self.dismiss(result)

    @on(Input.Submitted)
    def _on_input_submitted(self, _event: Input.Submitted) -> None:
        self._submit()

    @on(Button.Pressed, "#send")
    def _on_send(self) -> None:
        self._submit()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
