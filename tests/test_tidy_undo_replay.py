"""A replayed or forked tidy run undoes only the moves it made itself.

A replay (or fork) starts from another run's checkpoint with that run's
state, which after the ``undo`` step names that run's undo list. The files
that list names are that run's moves, not the replay's: undoing the replay
once moved back the files a third run had moved since (and removed its
folders), leaving that run's report and undo wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from desktop_app.flows.tidy_undo import NothingToUndo, undo_list_of
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import flowdesk


def tops(folder: Path) -> list[str]:
    """The folder's visible entries, files and subfolders, by name."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def tidied_files(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.parent != folder
    )


def run_tidy(db: Path, folder: Path) -> str:
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    assert started.returncode == 0, started.stderr
    return started.stdout.splitlines()[0]


def answer_yes(db: Path, run_id: str) -> None:
    answered = flowdesk(db, "answer", run_id, "yes")
    assert answered.returncode == 0, answered.stderr


def last_checkpoint(db: Path, run_id: str) -> str:
    store = open_store(db)
    try:
        latest = store.latest(run_id)
        assert latest is not None
        return f"{run_id}:{latest.revision}"
    finally:
        store.close()


def branch_of_an_undone_run(tmp_path: Path, how: list[str]) -> tuple[Path, Path, str, str]:
    """Run A tidied five files and was undone; B is ``how`` (replay or fork)
    of A's last checkpoint; then run C tidied the same five files."""
    db, folder = tmp_path / "u.db", tmp_path / "du"
    folder.mkdir()
    for i in range(1, 6):
        (folder / f"f{i}.txt").write_text(str(i))
    assert flowdesk(db, "db", "apply").returncode == 0
    a = run_tidy(db, folder)
    answer_yes(db, a)
    assert flowdesk(db, "undo", a).returncode == 0
    branched = flowdesk(db, *how[:1], last_checkpoint(db, a), *how[1:])
    assert branched.returncode == 0, branched.stderr
    b = branched.stdout.splitlines()[0]
    assert "no files" in flowdesk(db, "show", b).stdout
    c = run_tidy(db, folder)
    answer_yes(db, c)
    assert tops(folder) == ["Documents"] and len(tidied_files(folder)) == 5
    return db, folder, b, c


def assert_c_untouched_then_undone(db: Path, folder: Path, c: str) -> None:
    assert tops(folder) == ["Documents"] and len(tidied_files(folder)) == 5
    assert "5 files: 5 moved" in flowdesk(db, "show", c).stdout
    undone = flowdesk(db, "undo", c, "--json")
    assert undone.returncode == 0, undone.stderr
    report = json.loads(undone.stdout)
    assert (report["moved_back"], report["already_back"]) == (5, 0)
    assert tops(folder) == [f"f{i}.txt" for i in range(1, 6)]


@pytest.mark.scenario("S101")
def test_undo_of_a_replay_of_an_undone_run_moves_nothing_of_a_later_run(tmp_path):
    db, folder, b, c = branch_of_an_undone_run(tmp_path, ["replay"])
    undone = flowdesk(db, "undo", b)
    assert undone.returncode == 0, undone.stderr
    assert "moved nothing" in undone.stdout and "nothing to undo" in undone.stdout
    assert "moved back" not in undone.stdout
    assert_c_untouched_then_undone(db, folder, c)


@pytest.mark.scenario("S101")
def test_undo_of_a_fork_of_an_undone_run_moves_nothing_of_a_later_run(tmp_path):
    how = ["fork", "--changes", json.dumps({"approval": "yes"})]
    db, folder, b, c = branch_of_an_undone_run(tmp_path, how)
    undone = flowdesk(db, "undo", b, "--json")
    assert undone.returncode == 0, undone.stderr
    assert json.loads(undone.stdout)["moved_back"] == 0
    assert_c_untouched_then_undone(db, folder, c)


def test_the_app_undo_of_a_replay_finds_nothing_of_its_own_to_undo(tmp_path):
    # the app's `u` (and its Replay key, Engine.replay as the CLI) reads the
    # undo list the same way before it asks anything
    db, _folder, b, _c = branch_of_an_undone_run(tmp_path, ["replay"])
    store = open_store(db)
    try:
        try:
            undo_list_of(store, b)
        except NothingToUndo as exc:
            assert "moved nothing" in str(exc)
        else:
            raise AssertionError("the replay's undo list was found")
    finally:
        store.close()


@pytest.mark.scenario("S101")
def test_a_replay_that_moved_files_itself_undoes_only_those(tmp_path):
    db, folder = tmp_path / "u.db", tmp_path / "du"
    folder.mkdir()
    for name in ("a1.txt", "a2.txt", "a3.txt"):
        (folder / name).write_text(name)
    assert flowdesk(db, "db", "apply").returncode == 0
    a = run_tidy(db, folder)
    answer_yes(db, a)
    assert tidied_files(folder) == [f"Documents/{m}" for m in _months(folder, 3)]
    # B replays A from before its plan: it plans, and moves, the files added since
    for name in ("b1.txt", "b2.txt"):
        (folder / name).write_text(name)
    replayed = flowdesk(db, "replay", f"{a}:0")
    assert replayed.returncode == 0, replayed.stderr
    b = replayed.stdout.splitlines()[0]
    answer_yes(db, b)
    assert tops(folder) == ["Documents"] and len(tidied_files(folder)) == 5
    # its undo list, edited to name A's moves too, still undoes B's alone
    b_list = folder / f".flowdesk-tidy-undo-{b}.json"
    a_list = folder / f".flowdesk-tidy-undo-{a}.json"
    edited = json.loads(b_list.read_text()) + json.loads(a_list.read_text())
    b_list.write_text(json.dumps(edited))
    undone = flowdesk(db, "undo", b, "--json")
    report = json.loads(undone.stdout)
    assert report["moved_back"] == 2 and report["already_back"] == 0
    assert sorted(line.split(":")[0] for line in report["left"]) == [
        "a1.txt",
        "a2.txt",
        "a3.txt",
    ]
    assert all("is not a move of tidy run" in line for line in report["left"])
    assert undone.returncode == 1  # the foreign lines are reported as left
    assert tops(folder) == ["Documents", "b1.txt", "b2.txt"]
    assert len(tidied_files(folder)) == 3
    again = flowdesk(db, "undo", a, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["moved_back"] == 3
    assert tops(folder) == ["a1.txt", "a2.txt", "a3.txt", "b1.txt", "b2.txt"]


def _months(folder: Path, n: int) -> list[str]:
    """``<YYYY-MM>/<name>`` of the ``n`` files tidied into ``Documents``."""
    found = sorted(p.relative_to(folder / "Documents").as_posix() for p in folder.rglob("*.txt"))
    assert len(found) == n
    return found


@pytest.mark.parametrize(
    "how", [["replay"], ["fork", "--changes", '{"approval": null}']], ids=["replay", "fork"]
)
def test_a_branch_taken_after_the_plan_asks_nothing_it_cannot_move(tmp_path, how):
    """A replay or fork of a tidy's checkpoint taken after its plan asked
    "move 3 files?", and yes moved nothing: the planned moves are rows of
    the run it came from. It now fails at the question, saying so and what
    to do, and leaves the files and the first run's question as they were."""
    db, folder = tmp_path / "u.db", tmp_path / "du"
    folder.mkdir()
    for i in range(1, 4):
        (folder / f"f{i}.txt").write_text(str(i))
    assert flowdesk(db, "db", "apply").returncode == 0
    a = run_tidy(db, folder)  # waits for its approval: the plan is stored
    branched = flowdesk(db, how[0], last_checkpoint(db, a), *how[1:])
    assert branched.returncode == 1, (branched.stdout, branched.stderr)
    b = branched.stdout.splitlines()[0]
    said = (
        "this tidy run continues another run's checkpoint taken after its plan: the 3 "
        "planned moves belong to that run, so there is nothing here to approve. Start a "
        f"new tidy of {folder} to plan it again."
    )
    assert said in branched.stderr, branched.stderr
    # no `resume with:` (a tryout pasted it: it failed the same way and
    # printed itself again); a resume still says why, and prints none either
    assert "resume" not in branched.stderr, branched.stderr
    again = flowdesk(db, "resume", b)
    assert again.returncode == 1 and said in again.stderr, again.stderr
    assert "resume" not in again.stderr, again.stderr
    assert "waits for" not in flowdesk(db, "show", b).stdout  # no question asked
    assert tops(folder) == ["f1.txt", "f2.txt", "f3.txt"]
    # the first run still asks, and its yes moves its three files
    answer_yes(db, a)
    assert tops(folder) == ["Documents"] and len(tidied_files(folder)) == 3
