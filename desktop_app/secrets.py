"""Secrets (API keys) live in the system keyring only: never in settings,
SQLite, logs or traces.

Service name ``flowdesk``. A locked or missing keyring gives a
:class:`~desktop_app.errors.SecretsError` that says what to do.
"""

from __future__ import annotations

import keyring
from keyring.errors import KeyringError, NoKeyringError

from desktop_app.errors import SecretsError

SERVICE = "flowdesk"


def get_secret(name: str) -> str | None:
    """The secret called ``name``, or ``None`` when it is not set.

    A machine with no keyring backend at all (a headless server) has no
    secrets: that reads as ``None``, so a local model server that needs no key
    still works; a hosted API then answers 401, which says to set the key.

    Raises:
        SecretsError: the keyring exists but is locked or failing.
    """
    try:
        return keyring.get_password(SERVICE, name)
    except NoKeyringError:
        return None
    except KeyringError as exc:
        raise SecretsError(
            f"cannot read secret {name!r} from the keyring ({type(exc).__name__}: {exc}); "
            "unlock your keyring, or install a backend (see `keyring --list-backends`)"
        ) from exc


def set_secret(name: str, value: str) -> None:
    """Store ``value`` under ``name`` in the keyring.

    Raises:
        SecretsError: the keyring is locked or has no usable backend.
    """
    try:
        keyring.set_password(SERVICE, name, value)
    except KeyringError as exc:
        raise SecretsError(
            f"cannot store secret {name!r} in the keyring ({type(exc).__name__}: {exc}); "
            "unlock your keyring, or install a backend (see `keyring --list-backends`)"
        ) from exc


def delete_secret(name: str) -> None:
    """Remove ``name`` from the keyring (no-op when absent)."""
    try:
        keyring.delete_password(SERVICE, name)
    except keyring.errors.PasswordDeleteError:
        return
    except KeyringError as exc:
        raise SecretsError(f"cannot delete secret {name!r}: {exc}") from exc
