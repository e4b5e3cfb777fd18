"""Settings: the database path, durability and the model provider.

Saved to the TOML settings file (:func:`desktop_app.config.config_file`),
keeping every other key in it; a restart applies them (``FLOWDESK_*``
variables and ``--db`` still win over the file). The API key goes to the
system keyring only (:func:`desktop_app.secrets.set_secret`) and is never
shown back in full.
"""

from __future__ import annotations

import math
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from desktop_app.app.host import Host, host
from desktop_app.app.screens.help import HELP_BINDING
from desktop_app.app.widgets.bars import Footer
from desktop_app.config import MAX_REQUEST_S, config_file
from desktop_app.errors import FlowdeskError, has_secret, redact
from desktop_app.private import make_private_dirs

SYNCHRONOUS = ("NORMAL", "FULL", "EXTRA")

# -- TOML (tomllib reads; tomlkit writes, keeping comments and order) ---------


def dump_toml(data: dict[str, Any]) -> str:
    """``data`` as a TOML document (what :func:`tomllib.loads` reads back).

    Raises:
        TypeError: a value TOML cannot hold.
    """
    try:
        return tomlkit.dumps(data)
    except (TypeError, ValueError) as exc:  # tomlkit's ConvertError is a ValueError
        raise TypeError(f"cannot write to TOML: {exc}") from exc


def read_toml(path: Path) -> dict[str, Any]:
    """The settings file's keys (``{}`` when it does not exist).

    Raises:
        OSError: it cannot be read.
        tomllib.TOMLDecodeError: it is not valid TOML (it is left alone).
    """
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}


def save_settings(path: Path, top: dict[str, Any], model: dict[str, Any]) -> None:
    """Set ``top`` keys and ``[model]`` keys in the TOML file at ``path``,
    keeping its other keys; a ``None`` value removes the key. Written to a
    temporary file then renamed, so a crash never leaves half a file.

    The file is edited with tomlkit (style-preserving): its comments, key
    order and formatting survive; only the keys given change.

    Raises:
        OSError: it cannot be read or written.
        tomllib.TOMLDecodeError: it is not valid TOML (it is left alone).
        TypeError: a value TOML cannot hold.
    """
    read_toml(path)  # the same checks (and error) as the loader
    try:
        doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        doc = tomlkit.document()
    section = doc.get("model")
    if not isinstance(section, dict):
        section = tomlkit.table()
    for target, updates in ((doc, top), (section, model)):
        for k, v in updates.items():
            if v is None:
                if k in target:
                    del target[k]
            else:
                try:
                    target[k] = v
                except (TypeError, ValueError) as exc:
                    raise TypeError(f"cannot write {k} to TOML: {exc}") from exc
    if section:
        if "model" not in doc:
            doc["model"] = section
    elif "model" in doc:
        del doc["model"]
    text = tomlkit.dumps(doc)
    make_private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def masked(secret: str) -> str:
    """A key as ``sk-…7890``: never the whole of it."""
    if len(secret) >= 12:
        return f"{secret[:3]}…{secret[-4:]}"
    if len(secret) >= 6:
        return f"…{secret[-2:]}"
    return "…"


# -- the screen ---------------------------------------------------------------


class KeyStatus(Message):
    """What the keyring holds (``text``), or why it failed (``error``)."""

    def __init__(self, text: str, error: str | None = None, saved: bool = False) -> None:
        super().__init__()
        self.text = text
        self.error = error
        self.saved = saved


#: rows of the settings dialog that are not its form: border and padding
#: (4), title and its margin (2), the buttons' margin and height (4), the footer (1)
FRAME_ROWS = 11


class SettingsScreen(ModalScreen[None]):
    """Edit the settings file and store the API key in the keyring."""

    BINDINGS = [Binding("escape", "close", "Close"), HELP_BINDING]

    def __init__(self) -> None:
        super().__init__()
        self.field_errors: dict[str, str] = {}
        self.saved_text = ""
        self.key_text = ""
        self.saving_key = False

    @property
    def flowdesk(self) -> Host:
        return host(self.app)

    @property
    def key_name(self) -> str:
        return self.flowdesk.settings.model.api_key_name

    def compose(self) -> ComposeResult:
        from desktop_app.bootstrap import on_postgres

        settings = self.flowdesk.settings
        model = settings.model
        # the form scrolls on a short terminal; Save and Close stay below it
        with Vertical(id="dialog"):
            yield Label("[b]Settings[/b]")
            with VerticalScroll(id="form"):
                yield Label("Database", classes="section")
                yield Static(
                    Text.assemble(
                        redact(str(settings.db_path)),  # a URL's password never shown
                        (" (start with --db PATH or FLOWDESK_DB_PATH to use another)", "dim"),
                    ),
                    id="db-path",
                )
                durability = Label("Durability (SQLite synchronous)")
                synchronous = Select(
                    [
                        ("NORMAL: faster; a commit may roll back after power loss", "NORMAL"),
                        ("FULL: survives power loss (default)", "FULL"),
                        ("EXTRA: FULL, plus the journal's directory", "EXTRA"),
                    ],
                    allow_blank=False,
                    value=settings.synchronous,
                    compact=True,
                    id="synchronous",
                )
                # PostgreSQL: the server's settings decide; saving keeps the value set
                durability.display = synchronous.display = not on_postgres(settings.db_path)
                yield durability
                yield synchronous
                yield Label("Model provider", classes="section")
                yield Label("Base URL (OpenAI-compatible)")
                yield Input(  # its password and secret parameters never shown (save keeps them)
                    redact(model.base_url or ""),
                    placeholder="http://127.0.0.1:11434/v1",
                    compact=True,
                    id="base-url",
                )
                yield Static("", classes="field-error", id="error-base-url")
                yield Label("Model")
                yield Input(model.model or "", placeholder="llama3.2", compact=True, id="model")
                yield Label("Timeout (seconds per request)")
                yield Input(str(model.timeout_s), compact=True, id="timeout")
                yield Static("", classes="field-error", id="error-timeout")
                yield Label(f"API key (keyring entry {self.key_name!r})", classes="section")
                yield Static("Reading the keyring…", id="key-status")
                yield Input(
                    placeholder="Paste the key; enter stores it",
                    password=True,
                    compact=True,
                    id="api-key",
                )
                with Horizontal(classes="buttons"):
                    yield Button("Store key", id="save-key")
            with Horizontal(id="dialog-buttons"):
                yield Static("", id="saved")  # what Save did, beside it
                yield Button("Save settings", variant="primary", id="save")
                yield Button("Close", id="close")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#base-url", Input).focus()
        self._fit(self.app.size.height)

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.height)

    def _fit(self, height: int) -> None:
        """The form takes what the terminal's height leaves beside the
        dialog's frame, title, buttons and the footer (it scrolls when that
        is less than it needs): Save and Close are always on screen."""
        self.query_one("#form").styles.max_height = max(3, height - FRAME_ROWS)
        self.read_key()

    # -- settings file ------------------------------------------------------------

    def _field_error(self, name: str, message: str) -> None:
        if message:
            self.field_errors[name] = message
        else:
            self.field_errors.pop(name, None)
        self.query_one(f"#error-{name}", Static).update(Text(message))

    def _say_saved(self, message: str) -> None:
        self.saved_text = message
        self.query_one("#saved", Static).update(Text(message))

    def save(self) -> bool:
        """Validate the fields and write them to the settings file."""
        base_url = self.query_one("#base-url", Input).value.strip()
        configured = self.flowdesk.settings.model.base_url
        if configured and base_url == redact(configured):
            base_url = configured  # shown masked, left as it was: its secrets stay
        model = self.query_one("#model", Input).value.strip()
        timeout_text = self.query_one("#timeout", Input).value.strip()
        synchronous = self.query_one("#synchronous", Select).value
        ok = True
        if base_url and not base_url.startswith(("http://", "https://")):
            self._field_error("base-url", "Start it with http:// or https://")
            ok = False
        elif base_url != configured and has_secret(base_url) and redact(base_url) == base_url:
            # edited from its masked form: the *** would be saved as the secret
            self._field_error(
                "base-url",
                "Its password or key shows as ***: type the whole URL with them again, or "
                "put the field back as it was shown",
            )
            ok = False
        else:
            self._field_error("base-url", "")
        try:
            timeout = float(timeout_text)
            if not math.isfinite(timeout) or not 0 < timeout <= MAX_REQUEST_S:
                raise ValueError  # what the settings refuse at the next launch
        except ValueError:
            self._field_error(
                "timeout", f"A number of seconds above 0 and at most {MAX_REQUEST_S:g}, e.g. 60"
            )
            ok = False
        else:
            self._field_error("timeout", "")
        if not ok:
            self._say_saved("Nothing saved: fix the fields marked above.")
            return False
        if synchronous not in SYNCHRONOUS:
            synchronous = self.flowdesk.settings.synchronous
        path = config_file()
        try:
            save_settings(
                path,
                {"synchronous": synchronous},
                {"base_url": base_url or None, "model": model or None, "timeout_s": timeout},
            )
        except tomllib.TOMLDecodeError as exc:
            message = f"Not saved: {path} is not valid TOML ({exc}); fix it first."
        except (OSError, TypeError) as exc:
            message = f"Not saved: cannot write {path}: {exc}"
        else:
            self._say_saved(f"Saved to {path}. Restart Flowdesk to apply.")
            self.flowdesk.say(f"Settings saved to {path}; restart Flowdesk to apply them.")
            return True
        self._say_saved(message)
        self.flowdesk.say(message, "error")
        return False

    # -- API key (keyring calls in workers: an unlock prompt may block) ----------

    @work(thread=True, exclusive=True, group="keyring", name="read API key")
    def read_key(self) -> None:
        from desktop_app.secrets import ENV_VAR, get_secret

        model = self.flowdesk.settings.model
        unused = "the keyring entry is not used while it is set"
        if model.api_key is not None:  # an explicit source wins (desktop_app.secrets)
            shown = masked(model.api_key.get_secret_value().strip())
            self.post_message(KeyStatus(f"in use: {shown}, from {ENV_VAR} ({unused})"))
            return
        if model.api_key_file is not None:
            self.post_message(
                KeyStatus(
                    f"in use: from the file {model.api_key_file} (model.api_key_file; {unused})"
                )
            )
            return
        try:
            value = get_secret(self.key_name)
        except FlowdeskError as exc:
            self.post_message(KeyStatus("unknown (the keyring cannot be read)", str(exc)))
            return
        except Exception as exc:
            self.post_message(KeyStatus("unknown", f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(KeyStatus(f"stored: {masked(value)}" if value else "not set"))

    @work(thread=True, exclusive=True, group="keyring", name="store API key")
    def store_key(self, value: str) -> None:
        from desktop_app.secrets import set_secret

        try:
            set_secret(self.key_name, value)
        except FlowdeskError as exc:
            self.post_message(KeyStatus("not stored", str(exc)))
        except Exception as exc:
            self.post_message(KeyStatus("not stored", f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(KeyStatus(f"stored: {masked(value)}", saved=True))

    def submit_key(self) -> None:
        if self.saving_key:
            return
        field = self.query_one("#api-key", Input)
        value = field.value.strip()
        if not value:
            self._show_key("Paste the key first.")
            return
        self.saving_key = True
        self._show_key("Storing the key in the keyring…")
        self.store_key(value)

    def _show_key(self, text: str) -> None:
        self.key_text = text
        self.query_one("#key-status", Static).update(Text(text))

    def on_key_status(self, message: KeyStatus) -> None:
        self.saving_key = False
        self._show_key(message.text)
        if message.error:
            self.flowdesk.say(message.error, "error")
        if message.saved:
            self.query_one("#api-key", Input).value = ""  # gone from the screen
            self.flowdesk.say(f"API key stored in the keyring as {self.key_name!r}.")

    # -- events --------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "api-key":
            self.submit_key()
        else:
            self.save()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "save":
            self.save()
        elif event.button.id == "save-key":
            self.submit_key()
        else:
            self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
