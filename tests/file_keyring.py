"""A keyring backend over a JSON file, for tests that run ``flowdesk
secrets set`` in a subprocess and read the key back in another one: the
system keyring is out of reach in tests (``tests/conftest.py`` forces a
failing one). Select it with ``PYTHON_KEYRING_BACKEND=tests.file_keyring.FileKeyring``
and name the file in ``TEST_KEYRING_FILE``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import keyring
from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked


class FileKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    @property
    def _file(self) -> Path:
        return Path(os.environ["TEST_KEYRING_FILE"])

    def _items(self) -> dict[str, str]:
        try:
            return dict(json.loads(self._file.read_text()))
        except FileNotFoundError:
            return {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._items().get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        items = self._items()
        items[f"{service}/{username}"] = password
        self._file.write_text(json.dumps(items))

    def delete_password(self, service: str, username: str) -> None:
        items = self._items()
        items.pop(f"{service}/{username}", None)
        self._file.write_text(json.dumps(items))


class LockedKeyring(KeyringBackend):
    """A keyring that is there but locked (a desktop keyring before its
    password is typed): every read and write raises ``KeyringLocked``.
    Select it with ``PYTHON_KEYRING_BACKEND=tests.file_keyring.LockedKeyring``."""

    priority = 1  # type: ignore[assignment]

    def get_password(self, service: str, username: str) -> str | None:
        raise KeyringLocked("the keyring is locked")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise KeyringLocked("the keyring is locked")

    def delete_password(self, service: str, username: str) -> None:
        raise KeyringLocked("the keyring is locked")


B = TypeVar("B", bound=KeyringBackend)


@contextmanager
def installed(backend: B) -> Iterator[B]:
    """``backend`` as this process's keyring for the ``with`` block (the
    one it replaced is put back after)."""
    before = keyring.get_keyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(before)
