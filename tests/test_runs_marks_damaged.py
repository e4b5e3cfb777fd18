"""``flowdesk runs`` marks a run whose checkpoint is damaged: it listed
such a run as ``waiting`` like any other while ``show``, ``waiting`` and
``resume`` said it was damaged (a tryout: nothing in the list said which
run a person should look at). The mark names ``show``, which says what works
on it; ``-o json`` has ``damaged`` for each flow run."""

from __future__ import annotations

import json

import apsw
import pytest

from tests.cli_support import flowdesk
from tests.delete_flows import FLOWS_ENV

ENV = {"FLOWDESK_FLOWS": FLOWS_ENV}


def _start(db, key: str) -> str:
    started = flowdesk(db, "start", "asked_only", "--input", json.dumps({"key": key}), env=ENV)
    assert started.returncode == 0, started.stderr
    return started.stdout.split()[0]


def _damage(db, run_id: str, how: str) -> None:
    conn = apsw.Connection(str(db))
    try:
        if how == "edited":  # its row no longer matches its checksum
            conn.execute(
                "UPDATE checkpoints SET steps = replace(steps, 'waiting', 'running') "
                "WHERE run_id = ? AND revision = (SELECT revision FROM runs WHERE run_id = ?)",
                (run_id, run_id),
            )
        else:  # deleted: the run's record names a checkpoint no longer there
            conn.execute(
                "DELETE FROM checkpoints WHERE run_id = ? "
                "AND revision = (SELECT revision FROM runs WHERE run_id = ?)",
                (run_id, run_id),
            )
    finally:
        conn.close()


@pytest.mark.scenario("S130")
@pytest.mark.parametrize("how", ["edited", "deleted"])
def test_runs_marks_the_run_whose_checkpoint_is_damaged_and_only_it(tmp_path, how: str) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    intact, damaged = _start(db, "k1"), _start(db, "k2")
    _damage(db, damaged, how)

    listed = flowdesk(db, "runs", env=ENV)
    assert listed.returncode == 0, listed.stderr
    lines = {ln.split()[0]: ln for ln in listed.stdout.splitlines()[1:]}
    assert "its checkpoint is damaged (see show)" in lines[damaged], listed.stdout
    assert "damaged" not in lines[intact]

    as_json = flowdesk(db, "runs", "-o", "json", env=ENV)
    rows = {r["run_id"]: r for r in json.loads(as_json.stdout)}
    assert rows[damaged]["damaged"] is True
    assert rows[intact]["damaged"] is False

    shown = flowdesk(db, "show", damaged, env=ENV)  # what the mark points at says it
    assert "damaged" in shown.stdout + shown.stderr
