"""Domain rows of the ``digest`` flow: one row per file of a run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from desktop_app.store.domain import code_point_order
from desktop_app.store.protocol import DomainWrite, SqlTx


@dataclass(frozen=True)
class DigestFile:
    """One scanned file.

    Attributes:
        path: relative to the scanned folder, ``/``-separated.
        kind: ``text``, ``markdown``, ``rst``, ``code`` or ``skipped``.
        title / summary: extracted text (``None`` when skipped).
        size_bytes: file size.
        skip_reason: why the file was skipped (binary, unreadable, ...).
        times_processed: how many committed transactions processed it (1 unless
            something is wrong: the crash tests count it).
    """

    path: str
    kind: str
    title: str | None
    summary: str | None
    size_bytes: int
    skip_reason: str | None = None
    times_processed: int = 1


def record_file(run_id: str, f: DigestFile) -> DomainWrite:
    """Upsert the row; a second commit for the same file bumps ``times_processed``.

    Portable SQL (SQLite and PostgreSQL): the existing row's column is
    qualified in ``DO UPDATE SET``, which PostgreSQL requires."""

    def write(tx: SqlTx) -> None:
        tx.execute(
            "INSERT INTO digest_files(run_id, path, kind, title, summary, size_bytes, "
            "skip_reason) VALUES (?,?,?,?,?,?,?) ON CONFLICT(run_id, path) DO UPDATE SET "
            "kind=excluded.kind, title=excluded.title, summary=excluded.summary, "
            "size_bytes=excluded.size_bytes, skip_reason=excluded.skip_reason, "
            "times_processed=digest_files.times_processed+1",
            (run_id, f.path, f.kind, f.title, f.summary, f.size_bytes, f.skip_reason),
        )

    return write


def files_of_run(run_id: str) -> Callable[[SqlTx], list[DigestFile]]:
    """Query op: every row of the run, ordered by path (code point order on
    every backend, see :func:`~desktop_app.store.domain.code_point_order`)."""

    def query(tx: SqlTx) -> list[DigestFile]:
        rows = tx.fetchall(
            "SELECT path, kind, title, summary, size_bytes, skip_reason, times_processed "
            f"FROM digest_files WHERE run_id=? ORDER BY {code_point_order(tx, 'path')}",
            (run_id,),
        )
        return [DigestFile(*r) for r in rows]

    return query
