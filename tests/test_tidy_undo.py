"""Undoing a tidy run: `flowdesk undo RUN` (and the app's `u`) moves every file
back with the forward moves' guarantees (no link followed, nothing replaced)
and removes the Kind/Month folders the undo leaves empty."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from desktop_app.errors import CheckpointNotFoundError
from desktop_app.flows.tidy_undo import undo_list_of, undo_tidy
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import flowdesk
from tests.test_cli_tidy import started_tidy


def files(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if not p.name.startswith(".") and (p.is_file() or p.is_symlink())
    )


def tidied(tmp_path: Path) -> tuple[Path, Path, str]:
    """A Downloads folder with a photo and a paper, tidied and approved from the CLI."""
    db, dl = tmp_path / "f.db", tmp_path / "Downloads"
    dl.mkdir()
    (dl / "photo.jpg").write_bytes(b"jpg")
    (dl / "paper.pdf").write_bytes(b"pdf")
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(dl)}))
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    answered = flowdesk(db, "answer", run_id, "yes")
    assert answered.returncode == 0, answered.stderr
    assert [f.split("/")[0] for f in files(dl)] == ["Documents", "Images"]
    return db, dl, run_id


def test_undo_moves_every_file_back_and_removes_the_emptied_folders(tmp_path):
    db, dl, run_id = tidied(tmp_path)
    month_folders = sorted({str(Path(f).parent) for f in files(dl)})  # Kind/YYYY-MM
    undone = flowdesk(db, "undo", run_id[:8], "--json")  # a unique prefix is enough
    assert undone.returncode == 0, undone.stderr
    report = json.loads(undone.stdout)
    assert report["run_id"] == run_id
    assert report["moved_back"] == 2 and report["left"] == []
    assert files(dl) == ["paper.pdf", "photo.jpg"]
    assert (dl / "photo.jpg").read_bytes() == b"jpg"
    # no Kind or Month folder is left behind: only the hidden undo list remains
    assert [p.name for p in dl.iterdir() if p.is_dir()] == []
    removed = sorted(Path(f).relative_to(dl).as_posix() for f in report["folders_removed"])
    assert removed == sorted(["Documents", "Images", *month_folders])

    again = flowdesk(db, "undo", run_id)
    assert again.returncode == 0, again.stdout  # running it again changes nothing
    assert f"tidy run {run_id}: 0 moved back, 2 already back" in again.stdout
    assert "left" not in again.stdout
    assert files(dl) == ["paper.pdf", "photo.jpg"]

    (dl / "paper.pdf").unlink()  # gone from both places: that one is reported
    lost = flowdesk(db, "undo", run_id)
    assert lost.returncode == 1
    assert "1 already back" in lost.stdout
    assert "left paper.pdf: no longer at" in lost.stdout and "nothing to move back" in lost.stdout


def test_a_file_at_the_old_place_is_never_replaced_and_its_folder_stays(tmp_path):
    db, dl, run_id = tidied(tmp_path)
    (dl / "photo.jpg").write_bytes(b"a newer photo")  # saved there after the tidy
    images = next((dl / "Images").iterdir())
    (images / "notes.txt").write_text("saved into the tidied folder since")
    undone = flowdesk(db, "undo", run_id)
    assert undone.returncode == 1
    assert "photo.jpg: " in undone.stdout and "is taken" in undone.stdout
    assert "run the undo again" in undone.stdout  # what to do about it
    assert (dl / "photo.jpg").read_bytes() == b"a newer photo"
    assert (images / "photo.jpg").read_bytes() == b"jpg"  # left where tidy put it
    assert (dl / "paper.pdf").read_bytes() == b"pdf"  # the other file went back
    assert not (dl / "Documents").exists()  # emptied, so removed
    assert images.is_dir()  # still holds files: kept, and said so
    assert f"kept folder {images} (it holds other files)" in undone.stdout


def test_a_folder_swapped_for_a_link_is_not_followed(tmp_path):
    db, dl, run_id = tidied(tmp_path)
    outside = tmp_path / "elsewhere"
    (dl / "Images").rename(outside)
    (dl / "Images").symlink_to(outside, target_is_directory=True)
    undone = flowdesk(db, "undo", run_id)
    assert undone.returncode == 1
    assert "photo.jpg: " in undone.stdout
    assert not (dl / "photo.jpg").exists()  # not fetched through the link
    assert files(outside) == [f"{next(outside.iterdir()).name}/photo.jpg"]
    assert (dl / "paper.pdf").exists()


def test_an_edited_undo_list_cannot_move_files_outside_its_folder(tmp_path):
    folder = tmp_path / "Downloads"
    (folder / "Images" / "2026-11").mkdir(parents=True)
    (folder / "Images" / "2026-11" / "a.jpg").write_bytes(b"a")
    secret = tmp_path / "secret.txt"
    secret.write_text("not tidy's")
    undo_list = folder / ".flowdesk-tidy-undo-r1.json"
    undo_list.write_text(
        json.dumps(
            [
                {"from": str(secret), "to": str(folder / "secret.txt")},
                {
                    "from": str(folder / "Images" / "2026-11" / "a.jpg"),
                    "to": str(tmp_path / "a.jpg"),
                },
            ]
        )
    )
    report = undo_tidy(undo_list)
    assert report.moved_back == 0
    assert [line.split(":")[0] for line in report.left] == ["secret.txt", "a.jpg"]
    assert all("is not" in line for line in report.left)
    assert secret.read_text() == "not tidy's" and not (folder / "secret.txt").exists()
    assert (folder / "Images" / "2026-11" / "a.jpg").exists() and not (tmp_path / "a.jpg").exists()
    assert report.folders_removed == []


def test_undo_refuses_what_is_not_a_tidy_run_with_an_undo_list(tmp_path):
    db, dl, run_id = tidied(tmp_path)
    store = open_store(db)
    try:
        assert undo_list_of(store, run_id).parent == dl
        with pytest.raises(CheckpointNotFoundError, match="no run nope"):
            undo_list_of(store, "nope")
    finally:
        store.close()
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("hello")
    digest = flowdesk(db, "run", "digest", "--folder", str(notes), "--out", str(tmp_path / "r.md"))
    assert digest.returncode == 0, digest.stderr
    digest_id = digest.stdout.splitlines()[0]
    refused = flowdesk(db, "undo", digest_id)
    assert refused.returncode == 2
    assert "not a tidy run" in refused.stderr


def test_the_undo_list_and_the_report_it_leaves_are_private(tmp_path):
    _db, dl, _run_id = tidied(tmp_path)
    (undo_list,) = dl.glob(".flowdesk-tidy-undo-*.json")
    assert os.stat(undo_list).st_mode & 0o777 == 0o600


def test_undo_of_a_waiting_or_rejected_run_says_what_happened(tmp_path):
    db, dl, run_id = started_tidy(tmp_path, {"photo.jpg": b"jpg"})
    waiting = flowdesk(db, "undo", run_id)
    assert waiting.returncode == 2
    assert "waits for approval" in waiting.stderr and f"flowdesk answer {run_id}" in waiting.stderr
    assert flowdesk(db, "answer", run_id, "no").returncode == 0
    rejected = flowdesk(db, "undo", run_id)  # not bad input: the folder is as it was
    assert rejected.returncode == 0, rejected.stderr
    assert "moved nothing; nothing to undo" in rejected.stdout
    assert files(dl) == ["photo.jpg"]


def test_a_lost_undo_list_says_the_files_stay_tidied(tmp_path):
    db, dl, run_id = tidied(tmp_path)
    (undo_list,) = dl.glob(".flowdesk-tidy-undo-*.json")
    undo_list.unlink()
    lost = flowdesk(db, "undo", run_id)
    assert lost.returncode == 2
    assert "does not exist" in lost.stderr and "stay where tidy put them" in lost.stderr
    assert [f.split("/")[0] for f in files(dl)] == ["Documents", "Images"]


def test_undo_of_a_tidy_whose_file_vanished_before_approval_exits_0(tmp_path):
    """A user's report: a planned file deleted before the approval was never
    moved (the run said it was left), yet every `undo` exited 1 listing it.
    Moves never made are nothing to undo: reported plainly, exit 0; and a
    file saved meanwhile at a move's destination (its move refused) is not
    taken for one tidy put there."""
    names = ("photo.jpg", "gone.png", "late.txt")
    db, dl, run_id = started_tidy(tmp_path, {name: name.encode() for name in names})
    (dl / "gone.png").unlink()
    from datetime import UTC, datetime

    month = datetime.fromtimestamp((dl / "late.txt").stat().st_mtime, tz=UTC).strftime("%Y-%m")
    (dl / "Documents" / month).mkdir(parents=True)
    (dl / "Documents" / month / "late.txt").write_bytes(b"saved there meanwhile")
    assert flowdesk(db, "answer", run_id, "yes").returncode == 0

    undone = flowdesk(db, "undo", run_id)
    assert undone.returncode == 0, undone.stdout
    assert f"tidy run {run_id}: 1 moved back, 2 never moved (nothing to undo)" in undone.stdout
    assert "gone.png: never moved (the file is gone and was not moved here)" in undone.stdout
    assert "late.txt: never moved (the destination exists already" in undone.stdout
    assert "left " not in undone.stdout
    assert files(dl) == [f"Documents/{month}/late.txt", "late.txt", "photo.jpg"]
    assert (dl / "Documents" / month / "late.txt").read_bytes() == b"saved there meanwhile"

    again = flowdesk(db, "undo", run_id, "-o", "json")
    assert again.returncode == 0, again.stdout
    report = json.loads(again.stdout)
    assert report["already_back"] == 1 and report["left"] == []
    assert len(report["never_moved"]) == 2


def test_show_says_a_tidy_run_was_undone(tmp_path):
    db, _dl, run_id = tidied(tmp_path)
    before = flowdesk(db, "show", run_id)
    assert "undone" not in before.stdout and "moved back" not in before.stdout
    assert flowdesk(db, "undo", run_id).returncode == 0
    shown = flowdesk(db, "show", run_id)
    assert "2 files: 2 moved back by undo" in shown.stdout
    undone = [ln for ln in shown.stdout.splitlines() if ln.startswith("undone ")]
    assert len(undone) == 1 and undone[0].endswith("(UTC): 2 files moved back")
    as_json = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
    assert as_json["undone_at"] is not None
    assert {f["outcome"] for f in as_json["files"]} == {"back"}
