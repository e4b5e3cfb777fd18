"""The built-in ``tidy`` flow: plan, approval with a stored deadline, moves
delivered through the outbox by ``FileMover`` (real files, real SQLite)."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from desktop_app.errors import RunStateError
from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.outbox import Dispatcher
from desktop_app.flows import builtin_flows
from desktop_app.flows.tidy import (
    DESTINATION,
    FileMover,
    TidyState,
    build_tidy_flow,
    is_affirmative,
    kind_of,
)
from desktop_app.store.domain.tidy import moves_of_run
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver

HOUR = 3600.0
ROOT = Path(__file__).resolve().parent.parent


def when(year: int, month: int) -> float:
    return datetime(year, month, 15, 12, 0, tzinfo=UTC).timestamp()


def make(path: Path, text: str, mtime: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))
    return path


def downloads(tmp_path: Path) -> Path:
    """A small Downloads folder: one file of each kind, plus things to leave alone."""
    d = tmp_path / "Downloads"
    make(d / "photo.jpg", "jpg", when(2025, 3))
    make(d / "report.pdf", "pdf", when(2025, 11))
    make(d / "song.mp3", "mp3", when(2024, 12))
    make(d / "clip.mp4", "mp4", when(2025, 3))
    make(d / "backup.tar.gz", "tgz", when(2025, 1))
    make(d / "script.py", "py", when(2025, 11))
    make(d / "README", "no extension", when(2025, 2))
    make(d / ".hidden.jpg", "hidden", when(2025, 3))
    make(d / "album" / "inner.jpg", "in a folder", when(2025, 3))
    return d


EXPECTED = {
    "photo.jpg": "Images/2025-03/photo.jpg",
    "report.pdf": "Documents/2025-11/report.pdf",
    "song.mp3": "Audio/2024-12/song.mp3",
    "clip.mp4": "Video/2025-03/clip.mp4",
    "backup.tar.gz": "Archives/2025-01/backup.tar.gz",
    "script.py": "Code/2025-11/script.py",
    "README": "Other/2025-02/README",
}


def tree(folder: Path) -> dict[str, str]:
    """Every regular file under ``folder`` (relative path -> text)."""
    return {
        p.relative_to(folder).as_posix(): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def engine_for(db_path: Path, clock: ManualClock | None = None, **kw: float) -> Engine:
    return Engine(open_store(db_path), flows=[build_tidy_flow(**kw)], clock=clock or ManualClock())


def mover_dispatcher(store) -> Dispatcher:
    return Dispatcher(store, {DESTINATION: FileMover(store)})


def rows(engine: Engine, run_id: str) -> dict[str, tuple[str | None, str, str | None]]:
    """name -> (destination relative to the folder, status, reason)"""
    folder = Path(engine.get(run_id).folder)
    out = {}
    for m in engine.store.query(moves_of_run(run_id)):
        dst = Path(m.dst).relative_to(folder).as_posix() if m.dst else None
        out[Path(m.src).name] = (dst, m.status, m.reason)
    return out


def test_tidy_is_a_builtin_flow():
    assert "tidy" in {f.name for f in builtin_flows()}


@pytest.mark.parametrize(
    ("name", "kind"),
    [("a.JPG", "images"), ("b.docx", "documents"), ("c.flac", "audio"), ("d.MKV", "video"),
     ("e.7z", "archives"), ("f.rs", "code"), ("g.xyz", "other"), ("Makefile", "other")],
)  # fmt: skip
def test_kind_by_extension(name, kind):
    assert kind_of(name) == kind


@pytest.mark.parametrize(
    ("answer", "yes"),
    [("yes", True), ("Y", True), (" Approve ", True), ("OK", True), ("no", False),
     ("yes please", False), ("", False), (None, False)],
)  # fmt: skip
def test_affirmative_answers(answer, yes):
    assert is_affirmative(answer) is yes


def test_approved_moves_are_delivered_by_the_outbox_with_an_undo_list(db_path, tmp_path):
    folder = downloads(tmp_path)
    before = tree(folder)
    engine = engine_for(db_path)
    res = engine.run("tidy", {"folder": str(folder)})
    assert res.status == "waiting" and res.state.planned == len(EXPECTED)
    (wait,) = engine.waits(res.run_id)
    assert wait.kind == "input" and "move 7 files" in wait.prompt and str(folder) in wait.prompt
    assert all(status == "planned" for _, status, _ in rows(engine, res.run_id).values())
    assert tree(folder) == before  # planning touches nothing

    done = engine.resume_with(res.run_id, "Yes")
    assert done.status == "completed" and done.state.queued == len(EXPECTED)
    undo = Path(done.state.undo_path)
    assert undo == folder / f".flowdesk-tidy-undo-{res.run_id}.json"
    assert tree(folder) == {**before, undo.name: undo.read_text()}  # the flow only queues
    assert json.loads(undo.read_text()) == sorted(
        ({"from": str(folder / dst), "to": str(folder / name)} for name, dst in EXPECTED.items()),
        key=lambda e: e["to"],
    )
    pending = engine.store.intents(["pending"])
    assert {i.intent_id for i in pending} == {
        f"{res.run_id}:move:{folder / name}" for name in EXPECTED
    }

    dispatcher = mover_dispatcher(engine.store)
    assert dispatcher.dispatch() == len(EXPECTED)
    assert dispatcher.dispatch() == 0
    after = tree(folder)
    assert after == {
        **{dst: before[name] for name, dst in EXPECTED.items()},
        ".hidden.jpg": "hidden",
        "album/inner.jpg": "in a folder",
        undo.name: undo.read_text(),
    }
    assert rows(engine, res.run_id) == {
        name: (dst, "moved", None) for name, dst in EXPECTED.items()
    }
    for intent in engine.store.intents(["delivered"]):
        dst = folder / EXPECTED[Path(intent.payload["src"]).name]
        assert intent.receipt == {"moved": True, "dst": str(dst)}

    # the undo list really undoes: every file back where it was
    for entry in json.loads(undo.read_text()):
        os.rename(entry["from"], entry["to"])
    restored = {k: v for k, v in tree(folder).items() if k != undo.name}
    assert restored == before
    engine.store.close()


@pytest.mark.parametrize("answer", ["later", "yes please", "y", "ok", ""])
def test_an_answer_other_than_yes_or_no_is_refused_and_the_run_keeps_waiting(
    db_path, tmp_path, answer
):
    from desktop_app.errors import InputError

    folder = downloads(tmp_path)
    before = tree(folder)
    engine = engine_for(db_path)
    res = engine.run("tidy", {"folder": str(folder)})
    with pytest.raises(InputError, match="answer yes or no"):
        engine.resume_with(res.run_id, answer)
    assert engine.store.get_run(res.run_id).status == "waiting"
    assert [w.kind for w in engine.waits(res.run_id)] == ["input"]
    assert tree(folder) == before
    engine.store.close()


@pytest.mark.parametrize("answer", ["no", " NO "])
def test_no_moves_nothing(db_path, tmp_path, answer):
    folder = downloads(tmp_path)
    before = tree(folder)
    engine = engine_for(db_path)
    res = engine.run("tidy", {"folder": str(folder)})
    done = engine.resume_with(res.run_id, answer)
    assert done.status == "completed"
    answer = "no"  # trimmed and lower-cased: the interrupt's choices
    assert done.state.approval == answer and done.state.queued == 0
    assert done.state.undo_path is None
    assert engine.store.intents(["pending", "sending", "delivered", "failed"]) == []
    assert mover_dispatcher(engine.store).dispatch() == 0
    assert tree(folder) == before
    assert {(status, reason) for _, status, reason in rows(engine, res.run_id).values()} == {
        ("skipped", f"not approved (answer {answer!r})")
    }
    engine.store.close()


@pytest.mark.scenario("S28")
@pytest.mark.parametrize("how", ["tick", "recover"])
def test_unanswered_approval_times_out_after_24_hours_and_moves_nothing(db_path, tmp_path, how):
    folder = downloads(tmp_path)
    before = tree(folder)
    clock = ManualClock()
    engine = engine_for(db_path, clock)
    res = engine.run("tidy", {"folder": str(folder)})
    (wait,) = engine.waits(res.run_id)
    assert wait.deadline_at == clock.now() + 24 * HOUR  # stored when the wait began

    def wake() -> Engine:
        nonlocal engine
        if how == "tick":
            engine.tick()
            return engine
        engine.store.close()  # a restart: a fresh engine over the same file
        engine = engine_for(db_path, clock)
        engine.recover()
        return engine

    clock.advance(23 * HOUR)
    assert wake().status(res.run_id).status == "waiting"
    clock.advance(1 * HOUR + 1)
    assert wake().status(res.run_id).status == "timed_out"
    with pytest.raises(RunStateError):
        engine.resume_with(res.run_id, "yes")
    assert engine.store.intents(["pending", "sending", "delivered", "failed"]) == []
    assert mover_dispatcher(engine.store).dispatch() == 0
    assert tree(folder) == before
    assert not list(folder.glob(".flowdesk-tidy-undo-*"))
    engine.store.close()


def test_the_approval_timeout_is_a_parameter(db_path, tmp_path):
    folder = downloads(tmp_path)
    clock = ManualClock()
    engine = engine_for(db_path, clock, timeout_s=60.0)
    res = engine.run("tidy", {"folder": str(folder)})
    (wait,) = engine.waits(res.run_id)
    assert wait.deadline_at == clock.now() + 60.0
    clock.advance(61)
    assert engine.tick() == 1 and engine.status(res.run_id).status == "timed_out"
    engine.store.close()


class Killed(BaseException):
    """A simulated kill: ``except Exception`` cannot catch it."""


class KilledAfterRename(FileMover):
    def rename(self, src: Path, dst: Path) -> None:
        super().rename(src, dst)
        raise Killed()  # after the file moved, before the receipt was saved


class KilledBeforeRename(FileMover):
    def rename(self, src: Path, dst: Path) -> None:
        raise Killed()  # the intent is 'sending' but nothing moved


def approved_run(db_path: Path, folder: Path) -> str:
    engine = engine_for(db_path)
    res = engine.run("tidy", {"folder": str(folder)})
    done = engine.resume_with(res.run_id, "yes")
    assert done.status == "completed"
    engine.store.close()
    return res.run_id


@pytest.mark.scenario("S32")
@pytest.mark.parametrize("mover", [KilledAfterRename, KilledBeforeRename])
def test_crash_during_a_move_is_reconciled_not_repeated(db_path, tmp_path, mover):
    folder = tmp_path / "Downloads"
    make(folder / "a.jpg", "A", when(2025, 3))
    make(folder / "b.pdf", "B", when(2025, 4))
    run_id = approved_run(db_path, folder)

    store = open_store(db_path)
    with pytest.raises(Killed):
        Dispatcher(store, {DESTINATION: mover(store)}).dispatch()
    (sending,) = store.intents(["sending"])
    assert sending.intent_id == f"{run_id}:move:{folder / 'a.jpg'}"
    moved = mover is KilledAfterRename
    assert (folder / "a.jpg").exists() is not moved
    assert (folder / "Images/2025-03/a.jpg").exists() is moved
    store.close()

    store = open_store(db_path)  # a new process: reconcile, then deliver the rest
    assert mover_dispatcher(store).dispatch() == 2
    assert tree(folder) == {
        "Images/2025-03/a.jpg": "A",
        "Documents/2025-04/b.pdf": "B",
        f".flowdesk-tidy-undo-{run_id}.json": (
            folder / f".flowdesk-tidy-undo-{run_id}.json"
        ).read_text(),
    }
    delivered = {i.intent_id: i for i in store.intents(["delivered"])}
    first = delivered[sending.intent_id]
    assert first.receipt["moved"] is True
    assert first.receipt.get("already", False) is moved  # found done, not done again
    assert first.attempts == (1 if moved else 2)
    assert {m.status for m in store.query(moves_of_run(run_id))} == {"moved"}
    store.close()


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from desktop_app.flow.outbox import Dispatcher
    from desktop_app.flows.tidy import DESTINATION, FileMover
    from desktop_app.store.sqlite.store import open_store

    class Killer(FileMover):
        def rename(self, src, dst):
            super().rename(src, dst)
            os.kill(os.getpid(), signal.SIGKILL)

    store = open_store(sys.argv[1])
    Dispatcher(store, {DESTINATION: Killer(store)}).dispatch()
    """
)


@pytest.mark.scenario("S32")
def test_kill_9_after_the_rename_neither_repeats_nor_loses_the_move(db_path, tmp_path):
    folder = tmp_path / "Downloads"
    make(folder / "a.jpg", "A", when(2025, 3))
    make(folder / "b.jpg", "B", when(2025, 3))
    run_id = approved_run(db_path, folder)

    r = cli_forkserver.run_argv(
        [sys.executable, "-c", KILLER, str(db_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert not (folder / "a.jpg").exists() and (folder / "Images/2025-03/a.jpg").exists()
    assert (folder / "b.jpg").exists()  # its intent never started

    store = open_store(db_path)
    (sending,) = store.intents(["sending"])
    assert sending.intent_id == f"{run_id}:move:{folder / 'a.jpg'}"
    assert mover_dispatcher(store).dispatch() == 2
    files = {k: v for k, v in tree(folder).items() if not k.startswith(".flowdesk-tidy-undo-")}
    assert files == {"Images/2025-03/a.jpg": "A", "Images/2025-03/b.jpg": "B"}
    first = next(i for i in store.intents(["delivered"]) if i.intent_id == sending.intent_id)
    assert first.receipt == {
        "moved": True,
        "already": True,
        "dst": str(folder / "Images/2025-03/a.jpg"),
    }
    assert first.attempts == 1
    store.close()


def test_name_clashes_get_a_suffix_and_hidden_files_folders_and_links_stay(db_path, tmp_path):
    folder = tmp_path / "Downloads"
    make(folder / "Images/2025-03/photo.jpg", "older photo", when(2025, 3))
    make(folder / "Archives/2025-01/backup.tar.gz", "older backup", when(2025, 1))
    make(folder / "photo.jpg", "new photo", when(2025, 3))
    make(folder / "photo (1).jpg", "a photo named (1)", when(2025, 3))
    make(folder / "backup.tar.gz", "new backup", when(2025, 1))
    make(folder / ".secret.jpg", "hidden", when(2025, 3))
    make(folder / "big.iso.crdownload", "half a download", when(2025, 3))
    (folder / "link.jpg").symlink_to(folder / "photo.jpg")
    make(folder / "album" / "x.jpg", "in a folder", when(2025, 3))

    engine = engine_for(db_path)
    res = engine.run("tidy", {"folder": str(folder)})
    assert res.state.planned == 2 and res.state.left_in_place == 2
    linked = "a symbolic link in the folder points at it; moving it would break the link"
    assert rows(engine, res.run_id) == {
        "photo (1).jpg": ("Images/2025-03/photo (1).jpg", "planned", None),
        "photo.jpg": (None, "skipped", linked),
        "backup.tar.gz": ("Archives/2025-01/backup (1).tar.gz", "planned", None),
        "big.iso.crdownload": (None, "skipped", "download in progress"),
    }
    engine.resume_with(res.run_id, "yes")
    assert mover_dispatcher(engine.store).dispatch() == 2
    files = {k: v for k, v in tree(folder).items() if not k.startswith(".flowdesk-tidy-undo-")}
    assert files == {
        "Images/2025-03/photo.jpg": "older photo",
        "Images/2025-03/photo (1).jpg": "a photo named (1)",
        "photo.jpg": "new photo",
        "Archives/2025-01/backup.tar.gz": "older backup",
        "Archives/2025-01/backup (1).tar.gz": "new backup",
        "big.iso.crdownload": "half a download",
        ".secret.jpg": "hidden",
        "album/x.jpg": "in a folder",
    }
    assert (folder / "link.jpg").is_symlink()  # left alone, and not broken
    assert (folder / "link.jpg").read_text() == "new photo"
    engine.store.close()


def test_a_destination_taken_after_approval_is_never_overwritten(db_path, tmp_path):
    folder = tmp_path / "Downloads"
    make(folder / "a.jpg", "mine", when(2025, 3))
    run_id = approved_run(db_path, folder)
    make(folder / "Images/2025-03/a.jpg", "someone else's", when(2025, 3))
    store = open_store(db_path)
    assert mover_dispatcher(store).dispatch() == 1
    (intent,) = store.intents(["delivered"])
    assert intent.receipt == {
        "moved": False,
        "reason": "the destination exists already; nothing moved",
    }
    assert (folder / "a.jpg").read_text() == "mine"
    assert (folder / "Images/2025-03/a.jpg").read_text() == "someone else's"
    (row,) = store.query(moves_of_run(run_id))
    assert (row.status, row.reason) == ("refused", intent.receipt["reason"])
    store.close()


def test_an_empty_folder_asks_nothing_and_writes_no_undo_list(db_path, tmp_path):
    folder = tmp_path / "empty"
    make(folder / ".only-hidden", "x", when(2025, 3))
    engine = engine_for(db_path)
    res = engine.run("tidy", TidyState(folder=str(folder)))
    assert res.status == "completed" and res.state.planned == 0
    assert res.state.undo_path is None and engine.waits(res.run_id) == []
    engine.store.close()


def test_a_missing_folder_fails_the_run_with_a_clear_error(db_path, tmp_path):
    engine = engine_for(db_path)
    res = engine.run("tidy", {"folder": str(tmp_path / "nope")})
    assert res.status == "failed"
    assert "does not exist" in (res.error or "")
    engine.store.close()


def test_taking_the_next_planned_move_reads_no_queued_row(db_path):
    """The apply loop's read of the next planned row costs the same however
    many rows of the run are queued already: counted in SQLite virtual
    machine instructions (a progress handler called at every one). Through
    the primary key it stepped past every queued row (160 moves/s fell to
    24 over 100,000 files)."""
    from desktop_app.store.domain.tidy import TidyMove, mark_queued, next_planned, record_plan
    from desktop_app.store.protocol import Checkpoint, RunRecord, StepRecord

    store = open_store(db_path)
    store.create_run(
        RunRecord("r", "tidy", "1", "running", 0, 1.0, 1.0),
        Checkpoint("r", 0, "running", {}, {"a": StepRecord("a", "in_progress")}, ("a",), 1.0),
    )
    moves = [
        TidyMove(f"/d/f{i:05d}", f"/d/Other/2025-01/f{i:05d}", "other", "2025-01")
        for i in range(2001)
    ]
    store.write(record_plan("r", moves))

    def instructions() -> tuple[int, str]:
        count = [0]

        def op(tx):
            def tick() -> bool:
                count[0] += 1
                return False

            store.conn.set_progress_handler(tick, 1)
            try:
                return next_planned("r")(tx)
            finally:
                store.conn.set_progress_handler(None)

        move = store.query(op)
        return count[0], move.src

    first, src = instructions()
    assert src == "/d/f00000"
    for m in moves[:2000]:
        store.write(mark_queued("r", m.src, f"k{m.src}"))
    late, src = instructions()
    assert src == "/d/f02000"
    assert late == first
