"""S94: LangGraph's own checkpointer conformance suite
(``langgraph-checkpoint-conformance``) against ``FlowdeskSaver``, on a
SQLite file and on PostgreSQL: every base capability and every extended one
passes. The suite gets a fresh saver per capability over one database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)

from desktop_app.integrations.langgraph import FlowdeskSaver
from desktop_app.store.protocol import CheckpointStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def open_store(request, db_path: Path) -> Iterator[object]:
    """A function opening a new store over one database (SQLite or PostgreSQL)."""
    if request.param == "postgres":
        from desktop_app.store.postgres.store import open_postgres_store

        url = request.getfixturevalue("pg_url")
        yield lambda: open_postgres_store(url)
        return
    from desktop_app.store.sqlite.store import open_store as open_sqlite

    yield lambda: open_sqlite(db_path)


@pytest.mark.scenario("S94")
async def test_every_capability_passes(open_store) -> None:
    @checkpointer_test(name="FlowdeskSaver")
    async def flowdesk_saver() -> AsyncIterator[FlowdeskSaver]:
        store: CheckpointStore = open_store()
        try:
            yield FlowdeskSaver(store)
        finally:
            store.close()

    report = await validate(flowdesk_saver)
    report.print_report()  # the suite's own table, in the test's output
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    for cap in BASE_CAPABILITIES | EXTENDED_CAPABILITIES:
        result = report.results[cap.value]
        assert result.detected, f"{cap.value} not implemented"
        assert result.passed is True, (cap.value, result.failures)
        assert result.tests_passed > 0 and result.tests_failed == 0
    assert report.conformance_level() == "FULL"
