"""`replay` and `fork` say, before the new run executes, which steps run
again (their side effects are made again) and when `RUN` starts from a
first kept checkpoint that is not the run's start.

A tryout: a flow with `keep_last_n=2`; `flowdesk replay RUN` started from
revision 3, not the start the docs promised, ran only the last step, and
queued its HTTP post a second time, without a word (the app's Replay
dialog names the steps before it asks; the command line said nothing)."""

from __future__ import annotations

from pathlib import Path

from tests.cli_support import flowdesk
from tests.delete_flows import FLOWS_ENV

ENV = {"FLOWDESK_FLOWS": FLOWS_ENV}


def test_a_replay_of_a_pruned_run_names_its_start_and_the_step_it_runs_again(
    tmp_path: Path,
) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    ran = flowdesk(db, "start", "pruned", env=ENV)
    assert ran.returncode == 0, ran.stderr
    run_id = ran.stdout.split()[0]
    replayed = flowdesk(db, "replay", run_id, "--quiet", env=ENV)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stderr.splitlines()[:2] == [
        f"revision 3 is the first checkpoint run {run_id} keeps (its flow prunes older "
        "ones: keep_last_n)",
        "runs again: post; what it did (files moved or written, messages sent) is done again",
    ], replayed.stderr


def test_a_fork_names_the_step_it_runs_again(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    ran = flowdesk(db, "start", "pruned", env=ENV)
    assert ran.returncode == 0, ran.stderr
    run_id = ran.stdout.split()[0]
    forked = flowdesk(db, "fork", f"{run_id}:3", "--changes", '{"n": 10}', "--quiet", env=ENV)
    assert forked.returncode == 0, forked.stderr
    assert "first checkpoint" not in forked.stderr  # a revision given: said as given
    assert forked.stderr.splitlines()[0] == (
        "runs again: post; what it did (files moved or written, messages sent) is done again"
    ), forked.stderr


def test_show_lists_a_pruned_run_s_steps_in_the_order_it_took_them(tmp_path: Path) -> None:
    """A tryout: after `keep_last_n` pruned a run, `show` listed its steps
    alphabetically (the snapshot written whole holds them in another order)."""
    import json

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = flowdesk(db, "start", "pruned", env=ENV).stdout.split()[0]
    shown = json.loads(flowdesk(db, "show", run_id, "-o", "json", env=ENV).stdout)
    assert [s["step_id"] for s in shown["steps"]] == ["one", "two", "three", "post"]
    text = flowdesk(db, "show", run_id, env=ENV).stdout
    listed = [ln.split()[0] for ln in text.split("steps:\n")[1].splitlines()[:4]]
    assert listed == ["one", "two", "three", "post"], text
