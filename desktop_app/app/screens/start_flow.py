"""Start any registered flow with a form generated from its declared inputs.

One input per input field the flow declares (``FlowBuilder(inputs=...)``;
every top-level field of its state model when it declares none), labelled
with the field's type and its description (pydantic ``Field(description=)``);
required fields are marked and defaults prefilled. The flow's description
shows under the flow selector.
Text-like fields (``str``, paths, string literals) take the text as typed;
any other field takes JSON (``3``, ``true``, ``["a", "b"]``), or the text
itself when it is not JSON, so pydantic can say what is wrong with it.
Validation errors are shown under their field.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from pathlib import PurePath
from typing import Any, Literal, cast

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static

from desktop_app.app.host import Host, host
from desktop_app.app.screens.help import HELP_BINDING
from desktop_app.app.screens.type_ahead import TypeAhead
from desktop_app.app.widgets.bars import Footer
from desktop_app.app.widgets.paths import FolderSuggester
from desktop_app.errors import ConfigError, InputError
from desktop_app.flow import CompiledFlow

#: state fields that name a folder: their input completes folder names
PATH_FIELDS = ("folder", "out")


def type_name(annotation: Any) -> str:
    """``str``, ``int``, ``list[str]``, ``pathlib.Path | None``..."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


def _members(annotation: Any) -> list[Any]:
    """The members of a union (``X | None`` gives ``[X]``), else ``[annotation]``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def is_text(annotation: Any) -> bool:
    """Whether a field takes the typed text as it is (not JSON)."""
    members = _members(annotation)
    if not members:
        return False
    for member in members:
        if typing.get_origin(member) is Literal:
            if not all(isinstance(v, str) for v in typing.get_args(member)):
                return False
        elif not (
            isinstance(member, type)
            and (issubclass(member, str | PurePath))
            and not (issubclass(member, enum.Enum) and not issubclass(member, str))
        ):
            return False
    return True


def field_key(name: str, info: FieldInfo) -> str:
    """The key ``model_validate`` expects for a field (its alias when it has one)."""
    return info.alias or name


def prefill(info: FieldInfo) -> str:
    """The default as the field's text (``""`` when required or ``None``)."""
    if info.is_required():
        return ""
    try:
        default = info.get_default(call_default_factory=True, validated_data={})
    except Exception:  # a factory that needs other fields: leave it empty
        return ""
    if default is None:
        return ""
    if is_text(info.annotation):
        return str(default.value if isinstance(default, enum.Enum) else default)
    try:
        dumped = TypeAdapter[Any](cast(Any, info.annotation)).dump_python(default, mode="json")
        return json.dumps(dumped, ensure_ascii=False)
    except Exception:
        return ""


def parse_field(info: FieldInfo, text: str) -> Any:
    """The value a field's text stands for (see the module docstring)."""
    if is_text(info.annotation):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def form_fields(flow: CompiledFlow[Any]) -> list[tuple[str, FieldInfo]]:
    """The fields a person fills in to start ``flow``: its declared inputs, in
    the order declared, else every field of its state model."""
    fields = flow.state_type.model_fields
    names = flow.inputs if flow.inputs is not None else tuple(fields)
    return [(n, fields[n]) for n in names]


def build_state(
    model: type[BaseModel], texts: dict[str, str]
) -> tuple[dict[str, Any] | None, dict[str, str], str]:
    """Validate the form: ``(data, {field: error}, other error)``.

    ``data`` is the dict to start the run with (``None`` when invalid); empty
    fields are left out so their defaults apply (or pydantic says they are
    required).
    """
    data: dict[str, Any] = {}
    by_key: dict[str, str] = {}
    for name, info in model.model_fields.items():
        key = field_key(name, info)
        by_key[key] = name
        text = texts.get(name, "")
        if text.strip():
            data[key] = parse_field(info, text)
    try:
        model.model_validate(data)
    except ValidationError as exc:
        errors: dict[str, str] = {}
        other: list[str] = []
        for err in exc.errors():
            loc = err.get("loc") or ()
            field = by_key.get(str(loc[0])) if loc else None
            where = ".".join(str(p) for p in loc[1:])
            text = f"{where}: {err['msg']}" if where else err["msg"]
            if field is None:
                other.append(text)
            else:
                errors[field] = f"{errors[field]}; {text}" if field in errors else text
        return None, errors, "; ".join(other)
    return data, {}, ""


class StartFlowScreen(TypeAhead, ModalScreen[None]):
    """Pick a registered flow, fill in its state, start a run."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), HELP_BINDING]

    def __init__(self, flows: dict[str, CompiledFlow[Any]]) -> None:
        """``flows``: flow name -> the compiled flow (its inputs and description)."""
        super().__init__()
        self.flows = dict(sorted(flows.items()))
        self.flow_name: str | None = None
        self.field_errors: dict[str, str] = {}
        self.error_text = ""

    @property
    def flowdesk(self) -> Host:
        return host(self.app)

    @property
    def model(self) -> type[BaseModel] | None:
        flow = self.flow
        return flow.state_type if flow is not None else None

    @property
    def flow(self) -> CompiledFlow[Any] | None:
        return self.flows.get(self.flow_name) if self.flow_name else None

    @property
    def field_names(self) -> list[str]:
        """The fields the form shows now, in order."""
        flow = self.flow
        return [n for n, _ in form_fields(flow)] if flow is not None else []

    def compose(self) -> ComposeResult:
        names = list(self.flows)
        with Vertical(id="dialog"):
            yield Label("[b]Start a flow[/b]")
            yield Select(
                [(n, n) for n in names],
                prompt="Flow",
                allow_blank=not names,
                value=names[0] if names else Select.NULL,
                id="flow",
            )
            yield Static("", id="flow-description")
            # Not focusable itself: Tab goes from the flow selector to the first field.
            yield VerticalScroll(id="fields", can_focus=False)
            yield Static("", id="form-error")
            with Horizontal(id="buttons"):
                yield Button("Start", variant="primary", id="start")
                yield Button("Cancel", id="cancel")
        yield Footer(show_command_palette=False)

    async def on_mount(self) -> None:
        select = self.query_one("#flow", Select)
        value = select.value
        await self.show_flow(value if isinstance(value, str) else None)
        if len(self.flows) > 1:
            select.focus()  # choose the flow first; tab goes on to its fields

    def fields_ready(self) -> bool:
        """``False`` from a pick until the picked flow's fields are built."""
        return self.query_one("#flow", Select).value == (self.flow_name or Select.NULL)

    async def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        value = event.value
        name = value if isinstance(value, str) else None
        if name != self.flow_name:
            await self.show_flow(name)

    async def show_flow(self, name: str | None) -> None:
        """Build the form of flow ``name``."""
        self.flow_name = name
        fields = self.query_one("#fields", VerticalScroll)
        await fields.remove_children()
        self._clear_errors()
        flow = self.flow
        description = self.query_one("#flow-description", Static)
        if flow is None:
            description.update("")
            self._show_error("No flow is registered." if not self.flows else "Pick a flow.")
            return
        description.update(Text(flow.description or f"Flow {flow.name}.", style="italic"))
        widgets: list[Widget] = []
        for name_, info in form_fields(flow):
            label = Text.assemble(
                (name_, "bold"),
                f": {type_name(info.annotation)}",
                (" (required)", "bold") if info.is_required() else "",
            )
            widgets.append(Label(label, classes="field-label", id=f"label-{name_}"))
            if info.description:
                widgets.append(
                    Static(
                        Text(info.description, style="dim"),
                        classes="field-help",
                        id=f"help-{name_}",
                    )
                )
            placeholder = (
                f"type the {name_}"
                if is_text(info.annotation)
                else f'the {name_} as JSON, e.g. 3, true or ["a"]'
            )
            # a folder field completes folder names (right arrow takes the suggestion)
            suggester = FolderSuggester() if name_ in PATH_FIELDS else None
            widgets.append(
                Input(
                    prefill(info), placeholder=placeholder, id=f"field-{name_}", suggester=suggester
                )
            )
            widgets.append(Static("", classes="field-error", id=f"error-{name_}"))
        await fields.mount_all(widgets)
        self.call_after_refresh(self._fit)
        if widgets and not self.query_one("#flow", Select).has_focus:
            fields.query(Input).first().focus()
        self.flush_typed_ahead()  # keys typed while the fields were rebuilt

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        """Cap the fields' scroll area so the whole dialog, buttons included,
        fits the terminal (the fields scroll when there are more of them)."""
        dialog = self.query_one("#dialog", Vertical)
        fields = self.query_one("#fields", VerticalScroll)
        others = sum(
            c.outer_size.height + c.styles.margin.height for c in dialog.children if c is not fields
        )
        footer = self.query_one(Footer).outer_size.height  # docked: the dialog is above it
        room = (
            self.size.height
            - footer
            - others
            - dialog.styles.gutter.height
            - fields.styles.margin.height
        )
        fields.styles.max_height = max(3, min(24, room))

    # -- errors ----------------------------------------------------------------

    def _show_error(self, message: str) -> None:
        self.error_text = message
        self.query_one("#form-error", Static).update(Text(message))
        self.call_after_refresh(self._fit)

    def _clear_errors(self) -> None:
        for name in self.field_errors:
            self._field_error(name, "")
        self.field_errors = {}
        self._show_error("")

    def _field_error(self, name: str, message: str) -> None:
        for widget in self.query(f"#error-{name}"):
            cast(Static, widget).update(Text(message))

    def on_input_changed(self, event: Input.Changed) -> None:
        name = (event.input.id or "").removeprefix("field-")
        if name in self.field_errors:
            del self.field_errors[name]
            self._field_error(name, "")

    # -- submitting --------------------------------------------------------------

    def texts(self) -> dict[str, str]:
        """The form's text per field."""
        out: dict[str, str] = {}
        for widget in self.query(Input):
            if widget.id and widget.id.startswith("field-"):
                out[widget.id.removeprefix("field-")] = widget.value
        return out

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
        """Validate; show errors at their fields, or start the run and close."""
        model, name = self.model, self.flow_name
        if model is None or name is None:
            self._show_error("Pick a flow first.")
            return
        self._clear_errors()
        shown = set(self.field_names)
        texts = {k: v for k, v in self.texts().items() if k in shown}
        data, errors, other = build_state(model, texts)
        hidden = [f"{k}: {v}" for k, v in errors.items() if k not in shown]
        errors = {k: v for k, v in errors.items() if k in shown}
        other = "; ".join([*hidden, other] if other else hidden)
        if data is None:
            self.field_errors = errors
            for field, message in errors.items():
                self._field_error(field, message)
            self._show_error(other or "Fix the fields marked above.")
            if errors:
                first = next(iter(errors))
                self.query_one(f"#field-{first}", Input).focus()
            return
        try:
            started = self.flowdesk.controller.start_flow(name, data)
        except (InputError, ConfigError) as exc:  # tidy's folder is read-only, a bad
            # TRACEPARENT: said here, nothing started
            self._show_error(str(exc))
            return
        if started is not None:
            self.dismiss(None)
