"""Send a signal (name + key + JSON payload) from the app."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, Static

from desktop_app.app.screens.help import HELP_BINDING


@dataclass(frozen=True)
class SignalRequest:
    """What the user wants to send: ``payload`` is parsed JSON."""

    name: str
    key: str
    payload: Any


def parse_signal(name: str, key: str, payload: str) -> SignalRequest | str:
    """A request, or the message explaining what is wrong (shown in the form)."""
    if not name.strip() or not key.strip():
        return "Give the signal's name and key (a waiting run shows both)."
    text = payload.strip() or "null"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"The payload is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
    return SignalRequest(name.strip(), key.strip(), value)


class SignalScreen(ModalScreen[SignalRequest | None]):
    """A form: signal name, key and JSON payload; dismisses with the request."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), HELP_BINDING]

    def __init__(self, name: str = "", key: str = "", *, waiting: str = "") -> None:
        """``name``/``key`` prefill the form (from the selected run's signal
        wait); ``waiting`` says which run waits for it."""
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
            yield Label("Key")
            yield Input(self.prefill_key, placeholder="order-42", id="key")
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
