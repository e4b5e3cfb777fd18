"""In-process tests of the engine's cancel of a run whose record was set
back below its newest checkpoint outside Flowdesk (``Engine._finish``,
``Engine._record_behind``): the CLI's tests of it run in processes of their
own (tests/test_run_record_behind.py)."""

from __future__ import annotations

import apsw
import pytest

from desktop_app.errors import RevisionConflictError
from desktop_app.flow import Engine
from tests.delete_flows import Asked, asked_notify


def _set_back(db_path, run_id: str, by: int = 1) -> None:
    conn = apsw.Connection(str(db_path))
    try:
        conn.execute("UPDATE runs SET revision = revision - ? WHERE run_id = ?", (by, run_id))
    finally:
        conn.close()


def _waiting(sqlite_store) -> tuple[Engine, str]:
    engine = Engine(sqlite_store, flows=[asked_notify])
    run_id = engine.run(asked_notify, Asked(key="a")).run_id
    assert sqlite_store.get_run(run_id).status == "waiting"
    return engine, run_id


@pytest.mark.parametrize("by", [1])
def test_cancel_ends_a_run_set_back_without_a_save_naming_both_revisions(
    sqlite_store, db_path, by: int
) -> None:
    engine, run_id = _waiting(sqlite_store)
    newest = sqlite_store.get_run(run_id).revision
    _set_back(db_path, run_id, by)
    sqlite_store._last.clear()  # what another process reads: the file
    assert engine._record_behind(run_id) == (newest - by, newest)
    record = engine.cancel(run_id, "stop it")
    assert record.status == "canceled"
    assert record.error == (
        f"stop it; its record was at revision {newest - by}, below its newest checkpoint "
        f"{newest} (changed outside Flowdesk)"
    )
    again = sqlite_store.get_run(run_id)
    assert (again.status, again.revision) == ("canceled", newest - by)  # nothing appended
    assert max(i.revision for i in sqlite_store.history(run_id)) == newest


def test_a_run_at_its_newest_checkpoint_is_not_behind(sqlite_store) -> None:
    engine, run_id = _waiting(sqlite_store)
    assert engine._record_behind(run_id) is None


def test_a_real_conflict_is_raised_not_taken_for_a_record_behind(sqlite_store, monkeypatch):
    engine, run_id = _waiting(sqlite_store)

    def conflict(*_args, **_kwargs):
        raise RevisionConflictError("another writer saved first")

    monkeypatch.setattr(sqlite_store, "update_latest", conflict)
    with pytest.raises(RevisionConflictError, match="another writer saved first"):
        engine.cancel(run_id)
    assert sqlite_store.get_run(run_id).status == "waiting"
