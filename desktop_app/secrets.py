"""Secrets (API keys): the system keyring by default, never in the settings
file, SQLite, logs, traces or a command line.

Service name ``flowdesk``. A locked keyring gives a
:class:`~desktop_app.errors.SecretsError` that says what to do.

Where no keyring is available (a headless Linux box, a systemd service) the
model's key can come from, in this order:

1. the ``FLOWDESK_MODEL__API_KEY`` environment variable (an environment is
   not a command line: ``ps`` does not show it to other users);
2. a file named by ``model.api_key_file`` in settings, holding the key on one
   line, mode 0600: a file that the group or others can read is refused with
   :class:`~desktop_app.errors.KeyFileError` (``chmod 600 PATH``);
3. the keyring entry ``model.api_key_name`` (``flowdesk secrets set NAME``).

An explicit source (1 or 2) wins over the keyring, so a stale keyring entry
never shadows the key a service was given; giving both 1 and 2 is an error.
Keys travel as :class:`pydantic.SecretStr` (masked in ``repr`` and
tracebacks) until the provider puts them in the ``Authorization`` header.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import keyring
from keyring.errors import KeyringError, NoKeyringError
from pydantic import SecretStr

from desktop_app.errors import KeyFileError, SecretsError
from desktop_app.textsafe import shell_quote

if TYPE_CHECKING:
    from desktop_app.config import ModelSettings

SERVICE = "flowdesk"
ENV_VAR = "FLOWDESK_MODEL__API_KEY"
KEY_FILE_MAX_BYTES = 64 * 1024

WITHOUT_KEYRING = (
    f"without a keyring, give the key in the {ENV_VAR} environment variable, or put it "
    "alone in a file only you can read (`chmod 600 FILE`) and set "
    '`api_key_file = "FILE"` in the [model] section of the settings file'
)


def key_problem(key: str) -> str | None:
    """What makes ``key`` (surrounding whitespace already removed) unusable
    as an API key, which travels in an HTTP header as one token of printable
    ASCII, or ``None`` when it is usable. Never quotes the key: a key file
    with a comment line, a variable with a line break in it, or a key pasted
    with a non-ASCII character reached the provider's error text (and from
    there SQLite and exports) whole, past the masking of the key as
    configured; refused before any request is made."""
    lines = key.splitlines()
    if len(lines) == 1 and key.startswith("#"):
        return "holds a comment (a line starting with #), not a key: write the key alone"
    if len(lines) > 1:
        return (
            f"holds {len(lines)} lines; an API key is one line: write the key alone, with no "
            "comment or other line"
        )
    for i, ch in enumerate(key, 1):
        if ch.isspace():
            return f"has a space or tab inside it (character {i}); an API key has none"
        if not ch.isascii() or not ch.isprintable():
            return (
                f"has a character an HTTP header cannot carry (character {i}: non-ASCII or a "
                "control character); copy the key again from the provider"
            )
    return None


def get_secret(name: str) -> str | None:
    """The secret called ``name``, or ``None`` when it is not set.

    A machine with no keyring backend at all (a headless server) has no
    secrets: that reads as ``None``, so a local model server that needs no key
    still works; a hosted API then answers 401, which says to set the key.

    Raises:
        SecretsError: the keyring exists but is locked or failing (its own
            error type, or any other its backend raises).
    """
    try:
        return keyring.get_password(SERVICE, name)
    except NoKeyringError:
        return None
    except KeyringError as exc:
        raise SecretsError(
            f"cannot read secret {name!r} from the keyring ({type(exc).__name__}: {exc}); "
            f"unlock your keyring, or {WITHOUT_KEYRING}"
        ) from exc
    except Exception as exc:  # a backend's own error type (a plug-in, a D-Bus binding)
        raise SecretsError(
            f"cannot read secret {name!r}: the keyring backend failed "
            f"({type(exc).__name__}: {exc}); {WITHOUT_KEYRING}"
        ) from exc


def set_secret(name: str, value: str) -> None:
    """Store ``value`` under ``name`` in the keyring.

    Raises:
        SecretsError: ``value`` is no usable key (:func:`key_problem`;
            nothing stored), or the keyring is locked, has no usable backend
            or failed (its error's text masked: it may quote the value).
    """
    problem = key_problem(value.strip())
    if problem is not None:
        raise SecretsError(f"the secret for {name!r} {problem}; nothing was stored")
    try:
        keyring.set_password(SERVICE, name, value)
    except NoKeyringError as exc:
        raise SecretsError(
            f"cannot store secret {name!r}: this machine has no keyring; {WITHOUT_KEYRING}"
        ) from exc
    except KeyringError as exc:
        raise SecretsError(
            f"cannot store secret {name!r} in the keyring ({type(exc).__name__}: {exc}); "
            f"unlock your keyring, or {WITHOUT_KEYRING}"
        ) from exc
    except Exception as exc:  # a backend's own error type (a plug-in, a D-Bus binding)
        from desktop_app.observability import mask_secret, redact

        mask_secret(value)  # its error may quote the value
        raise SecretsError(
            f"cannot store secret {name!r}: the keyring backend failed "
            f"({type(exc).__name__}: {redact(str(exc))}); {WITHOUT_KEYRING}"
        ) from None  # its traceback may hold the value


def delete_secret(name: str) -> None:
    """Remove ``name`` from the keyring (no-op when absent)."""
    try:
        keyring.delete_password(SERVICE, name)
    except keyring.errors.PasswordDeleteError:
        return
    except KeyringError as exc:
        raise SecretsError(f"cannot delete secret {name!r}: {exc}") from exc


def read_key_file(path: str | os.PathLike[str]) -> SecretStr:
    """The key held in ``path`` (surrounding whitespace and the final newline
    removed). The mode is checked on the open descriptor: no group or other
    permission bits (0600 or 0400).

    Raises:
        KeyFileError: missing, unreadable, not a regular file, readable by the
            group or others, empty, or holding more than the key
            (:func:`key_problem`); the message says what to run.
    """
    p = Path(path).expanduser()
    quoted = shell_quote(str(p))
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError as exc:
        raise KeyFileError(
            f"the API key file {p} (model.api_key_file) does not exist; create it with the key "
            f"on one line and run `chmod 600 {quoted}`, or remove api_key_file from the settings"
        ) from exc
    except OSError as exc:
        raise KeyFileError(
            f"cannot open the API key file {p}: {exc.strerror or exc}; make it readable by you "
            f"only: `chmod 600 {quoted}`"
        ) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"the API key file {p} is not a regular file; point at a file")
        if st.st_mode & 0o077:
            raise KeyFileError(
                f"the API key file {p} can be read by other users (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); run `chmod 600 {quoted}` and try again"
            )
        data = os.read(fd, KEY_FILE_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > KEY_FILE_MAX_BYTES:
        raise KeyFileError(f"the API key file {p} is over 64 KiB; it should hold only the key")
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        raise KeyFileError(f"the API key file {p} is empty; write the key in it on one line")
    problem = key_problem(text)
    if problem is not None:
        raise KeyFileError(f"the API key file {p} {problem}; nothing was sent")
    return SecretStr(text)


def _key_in_settings_file() -> Path | None:
    """The settings file when its ``[model]`` section writes ``api_key``."""
    import tomllib

    from desktop_app.config import config_file

    path = config_file()
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return None  # loading the settings reports these
    section = data.get("model")
    if isinstance(section, dict) and any(k.casefold() == "api_key" for k in section):
        return path
    return None


def api_key_hint(model: ModelSettings) -> str:
    """Where :func:`model_api_key` reads the key from, and how to change it:
    the phrase a provider's refusal (HTTP 401/403) names, so the user
    changes the key the request carried (a command to run for the keyring
    entry, which a test runs as printed)."""
    if model.api_key is not None:
        return f"the key comes from the {ENV_VAR} environment variable"
    if model.api_key_file is not None:
        return f"the key comes from the file {model.api_key_file} (model.api_key_file)"
    return f"`flowdesk secrets set {model.api_key_name}` sets the key"


def model_api_key(model: ModelSettings) -> SecretStr | None:
    """The model provider's key: ``FLOWDESK_MODEL__API_KEY``, else the
    ``model.api_key_file`` file, else the keyring entry ``model.api_key_name``;
    ``None`` when none is set (a local server needs no key).

    Raises:
        SecretsError: the key is written in the settings file, or both the
            variable and a key file are given, or the keyring is locked, or
            the variable's or keyring entry's key is unusable
            (:func:`key_problem`: several lines, a space inside, a
            character an HTTP header cannot carry).
        KeyFileError: the key file is unusable (see :func:`read_key_file`).
    """
    if model.api_key is not None:
        written = _key_in_settings_file()
        if written is not None:
            raise SecretsError(
                f"the settings file {written} holds the API key (model.api_key); remove it "
                f"from there and use the keyring (`flowdesk secrets set {model.api_key_name}`), "
                f"the {ENV_VAR} environment variable, or a 0600 file named by "
                "model.api_key_file"
            )
        if model.api_key_file is not None:
            raise SecretsError(f"both {ENV_VAR} and model.api_key_file are set; keep one of them")
        key = model.api_key.get_secret_value().strip()
        if not key:
            raise SecretsError(f"{ENV_VAR} is set but empty; set the key or unset the variable")
        problem = key_problem(key)
        if problem is not None:
            raise SecretsError(f"{ENV_VAR} {problem}; nothing was sent")
        return SecretStr(key)
    if model.api_key_file is not None:
        return read_key_file(model.api_key_file)
    value = get_secret(model.api_key_name)
    if value is None:
        return None
    problem = key_problem(value.strip())
    if problem is not None:
        raise SecretsError(
            f"the keyring entry {model.api_key_name!r} {problem}; nothing was sent: store it "
            f"again with `flowdesk secrets set {model.api_key_name}`"
        )
    return SecretStr(value.strip())
