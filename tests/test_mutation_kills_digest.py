"""The domain rows of the ``digest`` flow (``desktop_app.store.domain.digest``),
on both SQL stores: one row per file, upserted, read back in path order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from desktop_app.store.domain.digest import DigestFile, files_of_run, record_file
from desktop_app.store.protocol import Checkpoint, RunRecord


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    s = request.getfixturevalue("sqlite_store" if request.param == "sqlite" else "pg_store")
    for run_id in ("r1", "r2"):
        s.create_run(
            RunRecord(run_id, "digest", "v1", "running", 0, 1000.0, 1000.0),
            Checkpoint(run_id, 0, "running", {}, {}, (), 1000.0),
        )
    yield s


def test_a_digest_row_per_file_in_path_order_counting_commits(store):
    x = DigestFile("docs/x.md", "markdown", "X", "about x", 120)
    b = DigestFile("b.bin", "skipped", None, None, 9, skip_reason="binary")
    store.write(record_file("r1", x))
    store.write(record_file("r1", b))
    store.write(record_file("r2", DigestFile("other.txt", "text", "O", "o", 1)))
    assert store.query(files_of_run("r1")) == [b, x]
    x2 = DigestFile("docs/x.md", "text", "X2", "about x again", 130, skip_reason=None)
    store.write(record_file("r1", x2))
    assert store.query(files_of_run("r1")) == [
        b,
        DigestFile("docs/x.md", "text", "X2", "about x again", 130, None, times_processed=2),
    ]
    assert store.query(files_of_run("r2")) == [DigestFile("other.txt", "text", "O", "o", 1)]
