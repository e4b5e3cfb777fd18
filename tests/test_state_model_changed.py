"""A new user's report: after a state field's type changed (``name: str``
to ``int``; the flow's version, which fingerprints the fields' names, did
not change), `show` still said the run's commands would move it on, and
`answer` and `fork RUN:0` said "The run was not resumed ... fork the run
from an earlier checkpoint" (there is none before 0, and a fork is not a
resume). `show` now says the stored state no longer fits the model and
what to change; the refusal says nothing ran and offers an earlier
checkpoint only where there is one. Real SQLite file, real processes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_support import flowdesk
from tests.typed_flows import FLOWS_ENV

STR = {"FLOWDESK_FLOWS": FLOWS_ENV}
INT = {**STR, "FLOWDESK_TEST_NAME_INT": "1"}


def test_a_run_whose_state_no_longer_fits_says_so_and_what_to_change(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply", env=STR).returncode == 0
    started = flowdesk(db, "start", "typed", "--input", json.dumps({"name": "ada"}), env=STR)
    assert started.returncode == 0, started.stderr
    run = started.stdout.splitlines()[0]

    shown = flowdesk(db, "show", run, env=INT)
    assert shown.returncode == 0, shown.stderr
    assert (
        "waiting: its stored state no longer fits flow 'typed''s state model at field 'name' ("
    ) in shown.stdout, shown.stdout
    assert "change the model back to what the run stored; then the commands below" in (shown.stdout)

    answered = flowdesk(db, "answer", run, "yes", env=INT)
    assert answered.returncode != 0
    assert "Nothing ran from it" in answered.stderr and "not resumed" not in answered.stderr
    assert "earlier checkpoint" in answered.stderr  # revision 1: 0 is before it
    forked = flowdesk(db, "fork", f"{run}:0", "--changes", '{"name": 5}', env=INT)
    assert forked.returncode != 0
    assert "revision 0 cannot be decoded at field 'name'" in forked.stderr, forked.stderr
    assert "Nothing ran from it" in forked.stderr and "earlier checkpoint" not in forked.stderr

    # the model changed back: the same commands move it on
    done = flowdesk(db, "answer", run, "yes", env=STR)
    assert done.returncode == 0 and f"run {run} completed" in done.stdout, done.stderr


def test_a_new_given_version_alone_is_said_as_such(tmp_path: Path) -> None:
    """The same steps under version 2 (FlowBuilder's ``version``) were
    refused as "its steps, their kinds, edges or routes, or its state's
    fields" changed: the refusal says the given version changed."""
    db = tmp_path / "v.db"
    assert flowdesk(db, "db", "apply", env=STR).returncode == 0
    run = flowdesk(db, "start", "versioned", env=STR).stdout.splitlines()[0]
    refused = flowdesk(db, "answer", run, "yes", env={**STR, "FLOWDESK_TEST_FLOW_VERSION": "2"})
    assert refused.returncode == 1
    assert "the version its FlowBuilder gives changed (1 to 2)" in refused.stderr, refused.stderr
    assert "its steps, their kinds, edges or routes" not in refused.stderr
