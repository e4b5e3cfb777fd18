"""Fork a run from a checkpoint: edit its state as JSON, validated before anything runs.

:func:`prepare_fork` is the pure part: it parses the edited text, validates
it against the flow's state model and returns only the fields that changed
(what :meth:`desktop_app.flow.Engine.fork` applies to the checkpoint's state).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static, TextArea

from desktop_app.app.screens.help import HELP_BINDING
from desktop_app.app.screens.type_ahead import TypeAhead
from desktop_app.app.state_diff import changed_fields
from desktop_app.app.widgets.bars import Footer

#: Validation errors listed in the modal; the rest are counted.
MAX_ERRORS = 8


class ForkInputError(ValueError):
    """The edited state cannot be used; ``lines`` say why (one per problem)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def error_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path: ``files[2].name``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(state)"


def validation_lines(exc: ValidationError) -> list[str]:
    """``path: message`` for each validation error."""
    errors = exc.errors(include_url=False)
    lines = [f"{error_path(tuple(e['loc']))}: {e['msg']}" for e in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        lines.append(f"… and {len(errors) - MAX_ERRORS} more")
    return lines


def state_json(state: Mapping[str, Any]) -> str:
    """A JSON-mode state as the pretty JSON the modal edits."""
    return json.dumps(dict(state), indent=2, ensure_ascii=False)


def prepare_fork(text: str, original: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """The changed fields of the edited state ``text``, validated by ``model``.

    Returns ``{field: value}`` for every top-level field whose validated
    value differs from ``original`` (values are the model's, ready for
    ``Engine.fork``).

    Raises:
        ForkInputError: the text is not a JSON object, names a field the
            model lacks, does not validate, or changes nothing.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ForkInputError(
            [f"Not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"]
        ) from None
    if not isinstance(data, dict):
        raise ForkInputError(
            [f"The state must be a JSON object ({{...}}), not {type(data).__name__}"]
        )
    unknown = [k for k in data if k not in model.model_fields]
    if unknown:
        raise ForkInputError([f"{k}: not a field of {model.__name__}" for k in unknown])
    try:
        state = model.model_validate(data)
    except ValidationError as exc:
        raise ForkInputError(validation_lines(exc)) from None
    dumped = state.model_dump(mode="json")
    changed = changed_fields(original, dumped)
    if not changed:
        raise ForkInputError(
            ["Nothing changed: edit a field first (or replay the checkpoint as it is with p)."]
        )
    return {name: getattr(state, name) for name in changed}


class ForkScreen(TypeAhead, ModalScreen[dict[str, Any] | None]):
    """Edit a checkpoint's state; dismiss with the changed fields, or ``None``.

    The editor has the focus from the moment the dialog is composed (not
    after a later focus call), and what is typed with the ``f`` that opens it
    (one read of the terminal), or before the editor took the focus, goes
    into the editor (:class:`TypeAhead`): those keys were lost, and ``p`` or
    ``u`` among them acted on the run's detail behind the dialog.
    """

    AUTO_FOCUS = "#editor"

    BINDINGS = [
        Binding("ctrl+s", "submit", "Fork"),
        Binding("escape", "cancel", "Cancel"),
        HELP_BINDING,
    ]

    def __init__(
        self, checkpoint_id: str, title: str, state: Mapping[str, Any], model: type[BaseModel]
    ) -> None:
        super().__init__()
        self.checkpoint_id = checkpoint_id
        self.title_text = title
        self.state = dict(state)
        self.model = model
        self._error = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text(self.title_text, style="bold"), id="title")
            yield Static(
                Text(
                    f"Edit the state ({self.model.__name__}); ctrl+s forks a new run with it, "
                    "escape cancels. It is validated first: nothing runs until it fits."
                ),
                id="hint",
            )
            yield TextArea(
                state_json(self.state), id="editor", soft_wrap=False, show_line_numbers=True
            )
            yield Static("", id="fork-error")
            with Horizontal(id="buttons"):
                yield Button("Fork", variant="primary", id="fork")
                yield Button("Cancel", id="cancel")
        yield Footer(show_command_palette=False)

    @property
    def editor(self) -> TextArea:
        return self.query_one("#editor", TextArea)

    @property
    def error_text(self) -> str:
        """What the modal says is wrong with the edited state (``""`` when nothing)."""
        return self._error

    def _show_error(self, message: str) -> None:
        self._error = message
        self.query_one("#fork-error", Static).update(Text(message))

    def on_text_area_changed(self, _event: TextArea.Changed) -> None:
        if self._error:
            self._show_error("")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "fork":
            self.action_submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_submit(self) -> None:
        try:
            changes = prepare_fork(self.editor.text, self.state, self.model)
        except ForkInputError as exc:
            self._show_error("\n".join(exc.lines))
            return
        self.dismiss(changes)
