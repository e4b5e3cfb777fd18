"""A small yes/no question (cancel a run?)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from desktop_app.app.screens.help import HELP_BINDING
from desktop_app.app.widgets.bars import Footer


class ConfirmScreen(ModalScreen[bool]):
    """Ask ``question``; dismiss with True (y, Yes) or False (n, escape, No)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "No"),
        HELP_BINDING,
    ]

    def __init__(self, question: str, detail: str = "", *, yes: str = "Yes", no: str = "No"):
        super().__init__()
        self.question = question
        self.detail = detail
        self._labels = (yes, no)

    def compose(self) -> ComposeResult:
        yes, no = self._labels
        with Vertical(id="dialog"):
            yield Label(Text(self.question, style="bold"), id="question")
            yield Static(Text(self.detail), id="detail")
            with Horizontal(id="buttons"):
                yield Button(yes, variant="error", id="yes")
                yield Button(no, variant="primary", id="no")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # enter does not destroy anything by accident

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
