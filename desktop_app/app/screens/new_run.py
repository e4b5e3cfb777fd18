"""The "new digest run" form: a modal with the folder to read and the output folder."""

from __future__ import annotations

import os
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from desktop_app.app.screens.help import HELP_BINDING
from desktop_app.app.screens.type_ahead import TypeAhead
from desktop_app.app.widgets.bars import Footer
from desktop_app.app.widgets.paths import FolderSuggester
from desktop_app.errors import InputError
from desktop_app.flows.digest import DigestInput, check_input


def default_out(folder: str) -> str:
    """Where the report goes when the output field is left empty.

    ``<folder>-digest`` next to the folder when its parent is writable,
    else ``~/flowdesk-digests/<folder name>``; ``""`` for an empty folder.
    """
    text = folder.strip()
    if not text:
        return ""
    src = Path(text).expanduser().resolve()
    name = src.name or "root"
    if os.access(src.parent, os.W_OK):
        return str(src.parent / f"{name}-digest")
    return str(Path.home() / "flowdesk-digests" / name)


class NewDigestScreen(TypeAhead, ModalScreen[DigestInput | None]):
    """Ask for a folder and an output folder; dismiss with validated input or ``None``."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), HELP_BINDING]
    AUTO_FOCUS = "#folder"

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("[b]New digest run[/b]")
            yield Label("Folder to read")
            yield Input(placeholder="~/notes", id="folder", suggester=FolderSuggester())
            yield Label("Output folder (digest.md is written there)")
            yield Input(placeholder="<folder>-digest", id="out", suggester=FolderSuggester())
            yield Static("", id="form-error")
            with Horizontal(id="buttons"):
                yield Button("Start", variant="primary", id="start")
                yield Button("Cancel", id="cancel")
        yield Footer(show_command_palette=False)

    @property
    def error_text(self) -> str:
        """The validation message shown in the form (``""`` when none)."""
        return self._error

    _error: str = ""

    def _show_error(self, message: str) -> None:
        self._error = message
        self.query_one("#form-error", Static).update(Text(message))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "folder":
            out = self.query_one("#out", Input)
            out.placeholder = default_out(event.value) or "<folder>-digest"
        if self._error:
            self._show_error("")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "start":
            self.submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def submit(self) -> None:
        """Validate with :func:`check_input`; show its message or dismiss with the input."""
        folder = self.query_one("#folder", Input).value.strip()
        out = self.query_one("#out", Input).value.strip() or default_out(folder)
        if not folder:
            self._show_error("Type the folder to read.")
            self.query_one("#folder", Input).focus()
            return
        try:
            given = check_input(folder, out)
        except InputError as exc:
            self._show_error(str(exc))
            return
        self.dismiss(given)
