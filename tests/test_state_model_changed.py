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
import os
import re
from pathlib import Path

import pytest

from tests.cli_support import flowdesk
from tests.typed_flows import FLOWS_ENV

STR = {"FLOWDESK_FLOWS": FLOWS_ENV}
INT = {**STR, "FLOWDESK_TEST_NAME_INT": "1"}


@pytest.mark.scenario("S118")
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
    # the mend the refusal names, in the same words
    assert (
        f"change the model back to what the run stored (or fork this checkpoint ({run}:1) with "
        "'name' changed to a value that fits (`flowdesk fork` with `--changes`, `Engine.fork` "
        "with a dict)); then the commands below move it on"
    ) in shown.stdout, shown.stdout

    answered = flowdesk(db, "answer", run, "yes", env=INT)
    assert answered.returncode != 0
    assert "Nothing ran from it" in answered.stderr and "not resumed" not in answered.stderr
    assert f"nothing was answered: run {run} still waits for it" in answered.stderr
    assert "earlier checkpoint" in answered.stderr  # revision 1: 0 is before it
    # the mend it names: a fork of that checkpoint giving the field a value that fits
    assert f"or fork this checkpoint ({run}:1) with 'name' changed to a value that fits" in (
        answered.stderr
    ), answered.stderr
    unmended = flowdesk(db, "replay", f"{run}:0", env=INT)  # nothing mends it
    assert unmended.returncode != 0
    assert "revision 0 cannot be decoded at field 'name'" in unmended.stderr, unmended.stderr
    assert "Nothing ran from it" in unmended.stderr and "earlier checkpoint" not in (
        unmended.stderr
    )
    # the changes are applied to the stored state before it is decoded (a
    # tryout: they were refused by the very decode error they mend)
    forked = flowdesk(db, "fork", f"{run}:1", "--changes", '{"name": 5}', env=INT)
    assert forked.returncode == 0, forked.stderr
    new = forked.stdout.split()[1] if forked.stdout.startswith("run ") else forked.stdout.split()[0]
    state = json.loads(flowdesk(db, "show", new, "-o", "json", env=INT).stdout)
    assert state["status"] == "waiting", state
    mended = flowdesk(db, "answer", new, "yes", env=INT)
    assert mended.returncode == 0 and f"run {new} completed" in mended.stdout, mended.stderr

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


@pytest.mark.scenario("S118")
def test_onto_current_gives_an_added_field_its_default_and_refuses_one_without(
    tmp_path: Path,
) -> None:
    """A field added to the state (a new version): the printed `resume
    --onto-current` was refused ("refusing to fill in a default") although
    the README lists an added field among what it handles (a tryout). It
    now gives the field its default and says so; a field with no default
    is refused naming it, with nothing changed, and goes on once the
    model gives it one."""
    from tests.cli_support import as_printed

    db = tmp_path / "o.db"
    assert flowdesk(db, "db", "apply", env=STR).returncode == 0
    run = flowdesk(db, "start", "typed", "--input", '{"name": "ada"}', env=STR).stdout.split()[0]

    required = {**STR, "FLOWDESK_TEST_OWNER": "required"}
    refused = flowdesk(db, "resume", run, "--onto-current", env=required)
    assert refused.returncode == 1
    assert "at field 'owner': Order has a field the run's state lacks and gives it no " in (
        refused.stderr
    ), refused.stderr
    assert "give the field a default in the model" in refused.stderr
    assert "Nothing changed" in refused.stderr and ".." not in refused.stderr
    # a replay or a fork stays on the old version: neither is offered (a tryout's loop)
    assert "fork" not in refused.stderr and "earlier checkpoint" not in refused.stderr

    # moved onto a version whose field also changed type: refused, naming what works
    retyped = {**STR, "FLOWDESK_TEST_OWNER": "default", "FLOWDESK_TEST_NAME_INT": "1"}
    refused = flowdesk(db, "resume", run, "--onto-current", env=retyped)
    assert refused.returncode == 1
    assert "at field 'name'" in refused.stderr and "to a type its stored value fits" in (
        refused.stderr
    ), refused.stderr
    assert "fork" not in refused.stderr and "earlier checkpoint" not in refused.stderr
    assert ".." not in refused.stderr
    assert json.loads(flowdesk(db, "show", run, "-o", "json", env=STR).stdout)["status"] == (
        "waiting"
    )

    defaulted = {**STR, "FLOWDESK_TEST_OWNER": "default"}
    stuck = flowdesk(db, "resume", run, env=defaulted)
    assert stuck.returncode == 1, stuck.stderr
    (hint,) = re.findall(r"`(flowdesk [^`]*--onto-current)`", stuck.stderr)
    moved = as_printed(hint, {**os.environ, **defaulted})
    assert moved.returncode == 0, moved.stderr
    assert "field 'owner' is new in version 1+" in moved.stderr, moved.stderr
    assert "given its default 'nobody'" in moved.stderr
    new = moved.stdout.splitlines()[1]
    shown = json.loads(flowdesk(db, "show", new, "-o", "json", env=defaulted).stdout)
    assert shown["status"] == "waiting", shown
    done = flowdesk(db, "answer", new, "yes", env=defaulted)
    assert done.returncode == 0 and f"run {new} completed" in done.stdout, done.stderr
