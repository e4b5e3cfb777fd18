"""The ``?`` help overlay: every key of the screen it is opened over."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Label, Static

from desktop_app.app.widgets.bars import Footer
from desktop_app.app.widgets.row_table import RowTable

#: The help key of a modal screen (the app's own bindings do not reach the
#: footer of a modal screen; F1 works even while a text field has focus).
HELP_BINDING = Binding("f1", "app.help", "Help", key_display="F1")

#: rows of the help dialog that are not its keys table: border and padding
#: (4), title (1), the table's margins (2), the last line (1), the footer (1)
FRAME_ROWS = 9


@dataclass(frozen=True)
class KeyHelp:
    """One key: how it is shown, what it does, and whether it works right now."""

    key: str
    description: str
    enabled: bool


def keys_of(screen: Screen[object]) -> list[KeyHelp]:
    """Every key active on ``screen`` (its own, its focused widget's and the
    app's), hidden footer keys included, in the order Textual resolves them;
    the screen's own keys that do not apply right now (its ``check_action``
    hides them from the footer: ``r`` / ``a`` / ``c`` for a finished run)
    in their place among its keys, marked not enabled."""
    app = screen.app
    out: list[KeyHelp] = []
    seen: set[tuple[str, str]] = set()
    at: dict[str, int] = {}  # key -> its row in ``out``
    for key, active in screen.active_bindings.items():
        binding = active.binding
        shown = binding.key_display or app.get_key_display(binding)
        description = binding.description or binding.action.replace("_", " ")
        if (shown, description) in seen:
            continue
        seen.add((shown, description))
        at[key] = len(out)
        out.append(KeyHelp(shown, description, active.enabled))
    after = -1  # the row of the screen's previous key listed
    for key, binding in screen._bindings:  # Textual has no public accessor
        if key in at:
            after = max(after, at[key])
            continue
        if app._check_action_state(binding.action, screen) is not False:
            continue
        shown = binding.key_display or app.get_key_display(binding)
        description = binding.description or binding.action.replace("_", " ")
        if (shown, description) in seen:
            continue
        seen.add((shown, description))
        after += 1
        out.insert(after, KeyHelp(shown, description, False))
        at = {k: i + (i >= after) for k, i in at.items()}
    return out


class HelpScreen(ModalScreen[None]):
    """A table of the keys of the screen below under ``title`` (``Keys —
    database t.db``); any of escape, ``?``, F1 closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("f1", "dismiss", "Close", show=False),
    ]

    def __init__(self, title: str, keys: list[KeyHelp]) -> None:
        super().__init__()
        self.title_text = title
        self.keys = keys

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog"):
            yield Label(Text(self.title_text, style="bold"), id="help-title")
            yield RowTable(id="help-keys")
            yield Static(Text("Dim keys do nothing right now. Escape closes.", style="dim"))
        yield Footer(show_command_palette=False)

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.height)

    def _fit(self, height: int) -> None:
        """The keys table takes what the terminal's height leaves beside the
        dialog's frame, title, last line and the footer, so it scrolls to
        its last key on any terminal."""
        self.query_one("#help-keys").styles.max_height = max(3, height - FRAME_ROWS)

    def on_mount(self) -> None:
        self._fit(self.app.size.height)
        table = self.query_one("#help-keys", DataTable)
        table.add_column("Key", key="key")
        table.add_column("Does", key="does")
        for k in self.keys:
            style = "" if k.enabled else "dim"
            table.add_row(Text(k.key, style="bold " + style), Text(k.description, style=style))
        table.focus()
