"""Folder confinement for every file operation: tidy never moves a file out of
its folder or through a symbolic link (planted before the plan or swapped in
during the approval wait), never replaces a file and never breaks a link;
digest never follows a link and never blocks on a FIFO; user-data files are
created 0600. Real symlinks, FIFOs and SQLite files in tmp_path."""

from __future__ import annotations

import os
import stat
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.outbox import Dispatcher
from desktop_app.flows import confined
from desktop_app.flows.confined import Refused, components, open_dir, rename_noreplace
from desktop_app.flows.digest import REPORT_NAME, DigestState, build_digest_flow, process_file
from desktop_app.flows.tidy import DESTINATION, FileMover, build_tidy_flow, planned_layout
from desktop_app.store.domain.digest import files_of_run
from desktop_app.store.domain.tidy import moves_of_run
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver

ROOT = Path(__file__).resolve().parent.parent
MARCH = datetime(2025, 3, 15, 12, 0, tzinfo=UTC).timestamp()
APRIL = datetime(2025, 4, 15, 12, 0, tzinfo=UTC).timestamp()


def make(path: Path, text: str, mtime: float = MARCH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))
    return path


def everything(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (no link followed): path -> text, or ``-> target``."""
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            p = Path(root) / name
            rel = p.relative_to(folder).as_posix()
            if p.is_symlink():
                out[rel] = f"-> {os.readlink(p)}"
            elif p.is_file():
                out[rel] = p.read_text()
    return out


def plan(db_path: Path, folder: Path) -> tuple[Engine, str]:
    engine = Engine(open_store(db_path), flows=[build_tidy_flow()], clock=ManualClock())
    res = engine.run("tidy", {"folder": str(folder)})
    assert res.status == "waiting", res.error
    return engine, res.run_id


def approve_and_deliver(engine: Engine, run_id: str) -> dict[str, dict]:
    """Approve, deliver every move; the receipts by source file name."""
    done = engine.resume_with(run_id, "yes")
    assert done.status in ("completed", "failed")
    Dispatcher(engine.store, {DESTINATION: FileMover(engine.store)}).dispatch()
    return {Path(i.payload["src"]).name: i.receipt for i in engine.store.intents(["delivered"])}


def statuses(engine: Engine, run_id: str) -> dict[str, tuple[str, str | None]]:
    return {
        Path(m.src).name: (m.status, m.reason) for m in engine.store.query(moves_of_run(run_id))
    }


# -- tidy: links planted before the plan -------------------------------------------


@pytest.mark.scenario("S54")
def test_a_symlinked_kind_folder_is_refused_and_nothing_leaves_the_folder(db_path, tmp_path):
    folder, elsewhere = tmp_path / "T", tmp_path / "elsewhere"
    elsewhere.mkdir()
    make(folder / "photo.jpg", "photo")
    make(folder / "report.pdf", "report")
    (folder / "Images").symlink_to(elsewhere, target_is_directory=True)

    engine, run_id = plan(db_path, folder)
    rows = statuses(engine, run_id)
    assert rows["photo.jpg"][0] == "refused"
    assert "Images is a symbolic link" in rows["photo.jpg"][1]
    assert rows["report.pdf"] == ("planned", None)
    approve_and_deliver(engine, run_id)

    assert list(elsewhere.iterdir()) == []  # nothing escaped
    assert (folder / "photo.jpg").read_text() == "photo"
    assert (folder / "Documents/2025-03/report.pdf").read_text() == "report"  # the rest goes on
    assert statuses(engine, run_id)["report.pdf"] == ("moved", None)
    engine.store.close()


@pytest.mark.scenario("S54")
def test_control_character_and_newline_names_are_refused_the_rest_goes_on(db_path, tmp_path):
    folder = tmp_path / "T"
    make(folder / "evil\nname.jpg", "newline")
    make(folder / "bell\x07.txt", "bell")
    make(folder / "fine.jpg", "fine")

    engine, run_id = plan(db_path, folder)
    rows = statuses(engine, run_id)
    assert (
        rows["evil\nname.jpg"][0] == "refused" and "control character" in rows["evil\nname.jpg"][1]
    )
    assert rows["bell\x07.txt"][0] == "refused"
    approve_and_deliver(engine, run_id)
    assert (folder / "evil\nname.jpg").read_text() == "newline"
    assert (folder / "bell\x07.txt").read_text() == "bell"
    assert (folder / "Images/2025-03/fine.jpg").read_text() == "fine"
    engine.store.close()


@pytest.mark.scenario("S54")
def test_a_file_a_link_points_at_stays_so_the_link_keeps_working(db_path, tmp_path):
    folder = tmp_path / "T"
    make(folder / "photo.jpg", "photo")
    make(folder / "other.jpg", "other")
    (folder / "relative-link.jpg").symlink_to("photo.jpg")
    (folder / "absolute-link").symlink_to(folder / "other.jpg")

    engine = Engine(open_store(db_path), flows=[build_tidy_flow()], clock=ManualClock())
    res = engine.run("tidy", {"folder": str(folder)})
    assert res.status == "completed"  # nothing to move: nothing to ask
    run_id = res.run_id
    rows = statuses(engine, run_id)
    assert {name: status for name, (status, _) in rows.items()} == {
        "photo.jpg": "skipped",
        "other.jpg": "skipped",
    }
    assert "would break the link" in rows["photo.jpg"][1]
    assert engine.get(run_id).planned == 0
    assert (folder / "relative-link.jpg").read_text() == "photo"
    assert (folder / "absolute-link").read_text() == "other"
    engine.store.close()


# -- tidy: swaps during the approval wait ---------------------------------------------


@pytest.mark.scenario("S54")
def test_a_kind_folder_swapped_for_a_link_during_the_wait_is_refused(db_path, tmp_path):
    folder, elsewhere = tmp_path / "T", tmp_path / "elsewhere"
    elsewhere.mkdir()
    make(folder / "photo.jpg", "photo")
    make(folder / "song.mp3", "song")
    engine, run_id = plan(db_path, folder)
    # during the 24 h wait: Images becomes a link out of the folder, and the
    # month folder inside Audio becomes one
    (folder / "Images").symlink_to(elsewhere, target_is_directory=True)
    (folder / "Audio").mkdir()
    (folder / "Audio" / "2025-03").symlink_to(elsewhere, target_is_directory=True)

    receipts = approve_and_deliver(engine, run_id)
    assert receipts["photo.jpg"]["moved"] is False
    assert "Images is a symbolic link" in receipts["photo.jpg"]["reason"]
    assert receipts["song.mp3"]["moved"] is False
    assert "2025-03 is a symbolic link" in receipts["song.mp3"]["reason"]
    assert list(elsewhere.iterdir()) == []
    assert (folder / "photo.jpg").read_text() == "photo"
    assert (folder / "song.mp3").read_text() == "song"
    assert {s for s, _ in statuses(engine, run_id).values()} == {"refused"}
    engine.store.close()


@pytest.mark.scenario("S54")
def test_the_folder_swapped_for_a_link_after_the_plan_moves_nothing(db_path, tmp_path):
    folder, decoy = tmp_path / "T", tmp_path / "decoy"
    make(folder / "photo.jpg", "mine")
    make(decoy / "photo.jpg", "decoy's")
    engine, run_id = plan(db_path, folder)
    folder.rename(tmp_path / "T.real")
    folder.symlink_to(decoy, target_is_directory=True)

    done = engine.resume_with(run_id, "yes")
    assert done.status == "failed" and "undo list" in (done.error or "")
    Dispatcher(engine.store, {DESTINATION: FileMover(engine.store)}).dispatch()
    (intent,) = engine.store.intents(["delivered"])
    assert intent.receipt["moved"] is False
    assert "symbolic link" in intent.receipt["reason"]
    assert everything(decoy) == {"photo.jpg": "decoy's"}  # nothing moved through the link
    assert everything(tmp_path / "T.real") == {"photo.jpg": "mine"}
    assert statuses(engine, run_id)["photo.jpg"][0] == "refused"
    engine.store.close()


@pytest.mark.scenario("S54")
def test_a_source_swapped_for_a_link_after_the_plan_is_not_moved(db_path, tmp_path):
    folder, secret = tmp_path / "T", make(tmp_path / "secret.jpg", "secret")
    make(folder / "photo.jpg", "photo")
    engine, run_id = plan(db_path, folder)
    (folder / "photo.jpg").unlink()
    (folder / "photo.jpg").symlink_to(secret)

    receipts = approve_and_deliver(engine, run_id)
    assert receipts["photo.jpg"] == {
        "moved": False,
        "reason": f"{folder / 'photo.jpg'} is now a symbolic link; nothing moved",
    }
    assert (folder / "photo.jpg").is_symlink() and not (folder / "Images").exists()
    engine.store.close()


@pytest.mark.scenario("S54")
def test_a_link_made_during_the_wait_keeps_its_target_in_place(db_path, tmp_path):
    folder = tmp_path / "T"
    make(folder / "photo.jpg", "photo")
    engine, run_id = plan(db_path, folder)
    (folder / "favourite.jpg").symlink_to("photo.jpg")

    receipts = approve_and_deliver(engine, run_id)
    assert receipts["photo.jpg"]["moved"] is False
    assert "would break the link" in receipts["photo.jpg"]["reason"]
    assert (folder / "favourite.jpg").read_text() == "photo"
    assert statuses(engine, run_id)["photo.jpg"][0] == "refused"
    engine.store.close()


@pytest.mark.scenario("S54")
@pytest.mark.parametrize("what", ["file", "dangling link"])
def test_a_destination_that_appears_just_before_the_rename_is_not_replaced(db_path, tmp_path, what):
    folder = tmp_path / "T"
    make(folder / "a.jpg", "a")
    make(folder / "b.pdf", "b", APRIL)
    target = folder / "Images/2025-03/a.jpg"

    class Racer(FileMover):
        """Someone creates the destination after every check, just before the rename."""

        def rename(self, src, dst):
            if not os.path.lexists(target):  # a.jpg is moved first: its folder exists now
                if what == "file":
                    make(target, "someone else's")
                else:
                    target.symlink_to(tmp_path / "nowhere")
            return super().rename(src, dst)

    engine, run_id = plan(db_path, folder)
    assert engine.resume_with(run_id, "yes").status == "completed"
    Dispatcher(engine.store, {DESTINATION: Racer(engine.store)}).dispatch()
    receipts = {Path(i.payload["src"]).name: i.receipt for i in engine.store.intents(["delivered"])}
    assert receipts["a.jpg"] == {
        "moved": False,
        "reason": "the destination exists already; nothing moved",
    }
    if what == "file":
        assert target.read_text() == "someone else's"
    else:
        assert os.readlink(target) == str(tmp_path / "nowhere")
    assert (folder / "a.jpg").read_text() == "a"
    assert receipts["b.pdf"]["moved"] is True  # the rest goes on
    assert statuses(engine, run_id)["a.jpg"][0] == "refused"
    engine.store.close()


@pytest.mark.scenario("S54")
@pytest.mark.parametrize(
    "dst",
    [
        "{f}/Images/2025-03/../../../escape.jpg",
        "{f}/../Images/2025-03/a.jpg",
        "{f}/Images/../2025-03/a.jpg",
        "/etc/Images/2025-03/a.jpg",
        "{f}/Images/2025-03/x\ny.jpg",
        "{f}/Secret/2025-03/a.jpg",
    ],
)
def test_a_destination_outside_the_planned_layout_is_refused(tmp_path, dst):
    with pytest.raises(Refused):
        planned_layout(tmp_path / "a.jpg", Path(dst.format(f=tmp_path)))


@pytest.mark.scenario("S54")
@pytest.mark.parametrize("rel", ["../secret.txt", "a/../../secret.txt", "/etc/passwd", "a/\n/b"])
def test_relative_paths_that_climb_or_hold_control_characters_are_refused(rel):
    with pytest.raises(Refused):
        components(rel)


# -- the rename that never replaces -------------------------------------------------


def test_rename_noreplace_uses_renameat2_on_linux_and_never_replaces(tmp_path):
    make(tmp_path / "a", "a")
    make(tmp_path / "b", "b")
    fd = open_dir(tmp_path)
    try:
        with pytest.raises(Refused, match="exists already"):
            rename_noreplace(fd, "a", fd, "b")
        assert (tmp_path / "b").read_text() == "b" and (tmp_path / "a").read_text() == "a"
        used = rename_noreplace(fd, "a", fd, "c")
    finally:
        os.close(fd)
    assert (tmp_path / "c").read_text() == "a" and not (tmp_path / "a").exists()
    if sys.platform.startswith("linux"):
        assert used == "renameat2"


def test_rename_noreplace_falls_back_to_link_and_unlink(tmp_path, monkeypatch):
    monkeypatch.setattr(confined, "_NATIVE", None)
    make(tmp_path / "a", "a")
    make(tmp_path / "b", "b")
    fd = open_dir(tmp_path)
    try:
        with pytest.raises(Refused, match="exists already"):
            rename_noreplace(fd, "a", fd, "b")
        assert rename_noreplace(fd, "a", fd, "c") == "link"
    finally:
        os.close(fd)
    assert (tmp_path / "b").read_text() == "b" and (tmp_path / "c").read_text() == "a"
    assert not (tmp_path / "a").exists()


def test_open_dir_refuses_a_link_anywhere_on_the_path(tmp_path):
    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    os.close(open_dir(tmp_path / "real" / "inner"))
    with pytest.raises(Refused, match="link is a symbolic link"):
        open_dir(tmp_path / "link" / "inner")


# -- digest -------------------------------------------------------------------------

SWAPPER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from desktop_app.flow import Engine
    from desktop_app.flows.digest import DigestState, build_digest_flow
    from desktop_app.store.sqlite.store import open_store

    db, folder, out, secret = (Path(a) for a in sys.argv[1:5])

    def swap(run_id, row):
        if row.path == "a.txt":  # after the scan, before b and c are read
            (folder / "b.txt").unlink()
            os.mkfifo(folder / "b.txt")
            (folder / "c.txt").unlink()
            (folder / "c.txt").symlink_to(secret)
            (folder / "sub").rename(folder / "sub.real")
            (folder / "sub").symlink_to(secret.parent, target_is_directory=True)

    engine = Engine(open_store(db), flows=[build_digest_flow(on_file=swap)])
    res = engine.run("digest", DigestState(folder=str(folder), out=str(out)))
    print(res.status, res.run_id, flush=True)
    """
)


@pytest.mark.scenario("S55")
def test_files_swapped_for_a_fifo_or_a_link_after_the_scan_are_skipped_not_read(db_path, tmp_path):
    folder, out = tmp_path / "docs", tmp_path / "out"
    secret = make(tmp_path / "private" / "secret.txt", "The launch code is swordfish.")
    make(folder / "a.txt", "Alpha is the first file. It is plain.")
    make(folder / "b.txt", "Beta is the second file.")
    make(folder / "c.txt", "Gamma is the third file.")
    make(folder / "sub" / "secret.txt", "A harmless note in a sub folder.")

    # a child process: on today's code the FIFO read blocks forever
    r = cli_forkserver.run_argv(
        [sys.executable, "-c", SWAPPER, str(db_path), str(folder), str(out), str(secret)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    status, run_id = r.stdout.split()
    assert status == "completed"
    report = (out / REPORT_NAME).read_text()
    assert "swordfish" not in report
    store = open_store(db_path)
    rows = {row.path: row for row in store.query(files_of_run(run_id))}
    store.close()
    assert rows["a.txt"].kind != "skipped"
    assert (rows["b.txt"].kind, rows["b.txt"].skip_reason) == (
        "skipped",
        "unreadable: a FIFO (named pipe), not a regular file",
    )
    assert (rows["c.txt"].kind, rows["c.txt"].skip_reason) == (
        "skipped",
        "a symbolic link, not followed",
    )
    assert rows["sub/secret.txt"].kind == "skipped"
    assert "sub is a symbolic link" in rows["sub/secret.txt"].skip_reason
    assert all(r.summary is None or "swordfish" not in r.summary for r in rows.values())
    assert "- b.txt (unreadable: a FIFO (named pipe), not a regular file)" in report
    assert "- c.txt (a symbolic link, not followed)" in report


@pytest.mark.scenario("S55")
def test_links_and_fifos_found_by_the_scan_are_listed_as_skipped(sqlite_store, tmp_path):
    folder, out = tmp_path / "docs", tmp_path / "out"
    outside = make(tmp_path / "outside" / "notes.txt", "Outside text must not be read.")
    make(folder / "real.md", "# Real\n\nA real file in the folder.")
    (folder / "to-file.txt").symlink_to(outside)
    (folder / "to-dir").symlink_to(outside.parent, target_is_directory=True)
    (folder / "dangling.txt").symlink_to(tmp_path / "nowhere")
    os.mkfifo(folder / "pipe")

    engine = Engine(sqlite_store, flows=[build_digest_flow()])
    res = engine.run("digest", DigestState(folder=str(folder), out=str(out)))
    assert res.status == "completed"
    rows = {r.path: (r.kind, r.skip_reason) for r in sqlite_store.query(files_of_run(res.run_id))}
    link = ("skipped", "a symbolic link, not followed")
    assert rows == {
        "real.md": ("markdown", None),
        "to-file.txt": link,
        "to-dir": link,
        "dangling.txt": link,
        "pipe": ("skipped", "unreadable: a FIFO (named pipe), not a regular file"),
    }
    report = (out / REPORT_NAME).read_text()
    assert "5 files: 1 summarised, 4 skipped." in report
    assert "Outside text" not in report


@pytest.mark.scenario("S55")
def test_process_file_never_reads_outside_the_folder(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    make(tmp_path / "secret.txt", "secret")
    row = process_file(folder, "../secret.txt")
    assert row.kind == "skipped" and row.summary is None and ".." in row.skip_reason


# -- files holding user data are 0600 ------------------------------------------------


@pytest.fixture
def open_umask():
    old = os.umask(0)  # the most permissive umask: the mode must not depend on it
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.scenario("S56")
def test_digest_report_is_created_0600_whatever_the_umask(sqlite_store, tmp_path, open_umask):
    folder, out = tmp_path / "docs", tmp_path / "out"
    make(folder / "a.txt", "Alpha is a file.")
    engine = Engine(sqlite_store, flows=[build_digest_flow()])
    first = engine.run("digest", DigestState(folder=str(folder), out=str(out)))
    assert first.status == "completed"
    assert mode(out / REPORT_NAME) == 0o600
    (out / REPORT_NAME).chmod(0o644)
    second = engine.run("digest", DigestState(folder=str(folder), out=str(out)))
    assert second.status == "completed"
    assert mode(out / REPORT_NAME) == 0o600  # the atomic replace keeps 0600
    assert [p.name for p in out.iterdir()] == [REPORT_NAME]  # no temp file left


@pytest.mark.scenario("S56")
def test_tidy_undo_list_is_created_0600_whatever_the_umask(db_path, tmp_path, open_umask):
    folder = tmp_path / "T"
    make(folder / "a.jpg", "a")
    engine, run_id = plan(db_path, folder)
    done = engine.resume_with(run_id, "yes")
    assert done.status == "completed"
    undo = Path(done.state.undo_path)
    assert mode(undo) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == sorted(["a.jpg", undo.name])
    engine.store.close()
