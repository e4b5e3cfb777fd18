"""Versioned SQL files in ``schema/``, applied explicitly, recorded in a ledger.

The engine never creates tables on import or on open. ``flowdesk db apply``
(:func:`apply`) runs each ``schema/<component>/*.sql`` file not yet applied,
in component order (core, events, domain) then file-name order, each in its
own ``BEGIN IMMEDIATE`` transaction together with its ledger row (name and
SHA-256 of the file). :func:`verify` is what the engine calls on open: it
refuses a missing schema, a file edited since it was applied, and a ledger
naming files this version of Flowdesk does not ship (a newer schema), each
with an error that says what to run.

The SQL ships inside the wheel as ``desktop_app/schema`` (hatch
``force-include``) and the PyInstaller bundle; from a source checkout it is
read from the repository's ``schema/`` folder.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal

import apsw

from desktop_app.errors import (
    SchemaChecksumError,
    SchemaMissingError,
    SchemaTooNewError,
)
from desktop_app.store.connection import translate

COMPONENTS: tuple[str, ...] = ("core", "events", "domain")
LEDGER = "flowdesk_schema_ledger"
FileState = Literal["applied", "pending", "edited", "unknown"]


@dataclass(frozen=True)
class SchemaFile:
    """One SQL file: ``component/name`` with its text and SHA-256 checksum."""

    component: str
    name: str
    sql: str

    @property
    def key(self) -> str:
        return f"{self.component}/{self.name}"

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SchemaStatus:
    """Where one schema file stands in a database."""

    key: str
    state: FileState
    applied_at: float | None


def schema_root() -> Traversable:
    """The folder holding ``core/``, ``events/``, ``domain/``."""
    packaged = resources.files("desktop_app").joinpath("schema")
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "schema"
    if checkout.is_dir():
        return checkout
    raise SchemaMissingError(
        "the schema files are not installed with Flowdesk (no desktop_app/schema); reinstall it."
    )


def schema_files(root: Traversable | None = None) -> list[SchemaFile]:
    """Every shipped schema file, in the order they are applied."""
    base = root if root is not None else schema_root()
    out: list[SchemaFile] = []
    for component in COMPONENTS:
        folder = base.joinpath(component)
        if not folder.is_dir():
            continue
        names = sorted(f.name for f in folder.iterdir() if f.name.endswith(".sql"))
        for name in names:
            out.append(SchemaFile(component, name, folder.joinpath(name).read_text("utf-8")))
    return out


def _ledger(conn: apsw.Connection) -> dict[str, tuple[str, float]]:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE type='table' AND name=?", (LEDGER,)
    ).fetchall()
    if not exists:
        return {}
    rows = conn.execute(f"SELECT component, name, checksum, applied_at FROM {LEDGER}")
    return {f"{c}/{n}": (str(s), float(a)) for c, n, s, a in rows}


def status(conn: apsw.Connection, files: Iterable[SchemaFile] | None = None) -> list[SchemaStatus]:
    """State of every shipped file plus any unknown ledger entries."""
    try:
        ledger = _ledger(conn)
    except apsw.Error as exc:
        raise translate(exc, conn.filename or None) from exc
    shipped = list(files) if files is not None else schema_files()
    out: list[SchemaStatus] = []
    for f in shipped:
        entry = ledger.pop(f.key, None)
        if entry is None:
            out.append(SchemaStatus(f.key, "pending", None))
        elif entry[0] != f.checksum:
            out.append(SchemaStatus(f.key, "edited", entry[1]))
        else:
            out.append(SchemaStatus(f.key, "applied", entry[1]))
    out.extend(SchemaStatus(k, "unknown", at) for k, (_, at) in sorted(ledger.items()))
    return out


def _raise_for(statuses: list[SchemaStatus], db_hint: str) -> None:
    edited = [s.key for s in statuses if s.state == "edited"]
    if edited:
        raise SchemaChecksumError(
            f"schema file(s) {', '.join(edited)} changed since they were applied to this "
            "database; Flowdesk will not guess. Restore the original files, or add a new "
            "numbered migration instead of editing an applied one."
        )
    unknown = [s.key for s in statuses if s.state == "unknown"]
    if unknown:
        raise SchemaTooNewError(
            f"this database has schema {', '.join(unknown)} that this version of Flowdesk "
            "does not know: it was written by a newer Flowdesk. Upgrade Flowdesk."
        )


def verify(conn: apsw.Connection, files: Iterable[SchemaFile] | None = None, db: str = "") -> None:
    """Refuse to run on a database whose schema is missing, edited or newer.

    Raises:
        SchemaMissingError: names ``flowdesk db apply``.
        SchemaChecksumError: an applied file was edited.
        SchemaTooNewError: the ledger names files this code does not ship.
    """
    statuses = status(conn, files)
    _raise_for(statuses, db)
    pending = [s.key for s in statuses if s.state == "pending"]
    if pending:
        target = f" --db {db}" if db else ""
        raise SchemaMissingError(
            f"the database is missing schema {', '.join(pending)}; "
            f"run `flowdesk{target} db apply` to apply it."
        )


def apply(conn: apsw.Connection, files: Iterable[SchemaFile] | None = None) -> list[SchemaFile]:
    """Apply every pending schema file; returns the files applied (maybe none).

    Each file and its ledger row commit in one ``BEGIN IMMEDIATE`` transaction.

    Raises:
        SchemaChecksumError / SchemaTooNewError: as :func:`verify`; nothing applied.
        StoreError: the SQL failed; that file's transaction rolled back.
    """
    shipped = list(files) if files is not None else schema_files()
    statuses = status(conn, shipped)
    _raise_for(statuses, "")
    pending = {s.key for s in statuses if s.state == "pending"}
    applied: list[SchemaFile] = []
    try:
        with conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {LEDGER} ("
                "component TEXT NOT NULL, name TEXT NOT NULL, checksum TEXT NOT NULL, "
                "applied_at REAL NOT NULL, PRIMARY KEY (component, name))"
            )
        for f in shipped:
            if f.key not in pending:
                continue
            with conn:
                conn.execute(f.sql)
                conn.execute(
                    f"INSERT INTO {LEDGER}(component, name, checksum, applied_at) VALUES (?,?,?,?)",
                    (f.component, f.name, f.checksum, time.time()),
                )
            applied.append(f)
    except apsw.Error as exc:
        raise translate(exc, conn.filename or None) from exc
    return applied
