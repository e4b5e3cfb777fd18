"""`tidy` from the command line: plan, approve with `flowdesk answer`, moves delivered."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.cli_support import flowdesk


def started_tidy(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Path, str]:
    """``db apply`` and ``start tidy`` on a new Downloads folder holding
    ``files`` (name -> bytes), through the real CLI: ``(db, folder, run_id)``."""
    db, dl = tmp_path / "f.db", tmp_path / "Downloads"
    dl.mkdir()
    for name, data in files.items():
        (dl / name).write_bytes(data)
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(dl)}))
    assert started.returncode == 0, started.stderr
    return db, dl, started.stdout.splitlines()[0]


def test_tidy_approved_from_the_cli_moves_files_and_writes_undo(tmp_path):
    db, dl = tmp_path / "f.db", tmp_path / "Downloads"
    dl.mkdir()
    (dl / "photo.jpg").write_bytes(b"jpg")
    (dl / "paper.pdf").write_bytes(b"pdf")
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(dl)}))
    assert started.returncode == 0 and started.stdout.strip().endswith("waiting")
    run_id = started.stdout.splitlines()[0]  # the run id comes first
    assert started.stdout.splitlines()[-1] == f"run {run_id} waiting"
    assert "move 2 files" in flowdesk(db, "waiting").stdout
    answered = flowdesk(db, "answer", run_id, "yes")
    assert answered.returncode == 0, answered.stderr
    assert "2 outbox intents delivered" in answered.stdout
    moved = sorted(
        p.relative_to(dl).as_posix()
        for p in dl.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    assert [m.split("/")[0] for m in moved] == ["Documents", "Images"]
    undo = json.loads(next(dl.glob(".flowdesk-tidy-undo-*.json")).read_text())
    assert sorted(Path(u["to"]).name for u in undo) == ["paper.pdf", "photo.jpg"]


def _month(path: Path) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(path.stat().st_mtime, tz=UTC).strftime("%Y-%m")


def test_answer_and_show_say_what_happened_to_each_file(tmp_path):
    """A user's report: `answer` said "4 outbox intent(s) delivered" and
    nothing about the files. Each outcome a tidy has (moved, renamed on a
    clash, target existed, vanished, left in place) is now said per file, by
    `answer` and by `show`, with the same words."""
    db, dl = tmp_path / "f.db", tmp_path / "Downloads"
    dl.mkdir()
    for name in ("photo.jpg", "paper.pdf", "gone.png", "late.txt", "song.mp3.crdownload"):
        (dl / name).write_bytes(name.encode())
    month = _month(dl / "photo.jpg")
    (dl / "Images" / month).mkdir(parents=True)
    (dl / "Images" / month / "photo.jpg").write_bytes(b"an older photo")  # a clash: renamed
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(dl)}))
    run_id = started.stdout.splitlines()[0]
    asked = flowdesk(db, "show", run_id).stdout
    assert "move 4 files" in asked and "1 more stays where it is." in asked  # not "1 more stay"
    (dl / "gone.png").unlink()  # vanishes while the plan waits for approval
    (dl / "Documents" / month).mkdir(parents=True)
    (dl / "Documents" / month / "late.txt").write_bytes(b"saved there meanwhile")

    answered = flowdesk(db, "answer", run_id, "yes")
    assert answered.returncode == 0, answered.stderr
    out = answered.stdout
    assert "outbox intent(s)" not in out
    assert (
        "5 files: 1 moved, 1 renamed on a clash, 1 skipped (the target exists), "
        "1 left (vanished before its move), 1 left in place"
    ) in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert f"Images/{month}/photo (1).jpg" in lines["photo.jpg"]
    assert f"Documents/{month}/paper.pdf" in lines["paper.pdf"]
    assert "vanished" in lines["gone.png"]
    assert "target exists" in lines["late.txt"]
    assert "download in progress" in lines["song.mp3.crdownload"]
    assert (dl / "Images" / month / "photo (1).jpg").read_bytes() == b"photo.jpg"
    assert (dl / "Documents" / month / "late.txt").read_bytes() == b"saved there meanwhile"

    shown = flowdesk(db, "show", run_id)
    for line in lines.values():  # the same words, from the same source
        assert line in shown.stdout
    assert "undone" not in shown.stdout  # it was not undone
    as_json = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
    assert as_json["undone_at"] is None
    outcomes = {f["name"]: f["outcome"] for f in as_json["files"]}
    assert outcomes == {
        "gone.png": "vanished",
        "late.txt": "exists",
        "paper.pdf": "moved",
        "photo.jpg": "renamed",
        "song.mp3.crdownload": "stays",
    }


def test_answer_of_a_big_tidy_lists_the_first_files_and_the_command_for_the_rest(tmp_path):
    from tests.cli_support import as_printed

    db, _dl, run_id = started_tidy(tmp_path, {f"note{i:02}.txt": b"n" for i in range(23)})
    answered = flowdesk(db, "answer", run_id, "yes")
    assert answered.returncode == 0, answered.stderr
    assert "23 files: 23 moved" in answered.stdout
    listed = [ln for ln in answered.stdout.splitlines() if ln.startswith("  note")]
    assert len(listed) == 20
    last = answered.stdout.splitlines()[-1]
    assert last.startswith("  … 3 more files: `") and last.endswith("` lists each")
    hint = last.split("`")[1]
    shown = as_printed(hint, env=dict(os.environ))
    assert shown.returncode == 0, shown.stderr
    assert sum(ln.startswith("  note") for ln in shown.stdout.splitlines()) == 23


def test_answer_of_a_tidy_bigger_than_show_lists_names_the_command_that_lists_each(tmp_path):
    """Past the 200 files ``show`` lists, ``answer`` names ``show -o json``
    (a tryout followed ``show`` and found 200 of 400)."""
    from tests.cli_support import as_printed

    db, _dl, run_id = started_tidy(tmp_path, {f"n{i:03}.txt": b"n" for i in range(201)})
    answered = flowdesk(db, "answer", run_id, "no")
    assert answered.returncode == 0, answered.stderr
    last = answered.stdout.splitlines()[-1]
    assert last.startswith("  … 181 more files: `") and last.endswith("` lists each")
    every = as_printed(last.split("`")[1], env=dict(os.environ))
    assert every.returncode == 0, every.stderr
    assert len(json.loads(every.stdout)["files"]) == 201


def test_answer_on_a_run_answered_already_says_so_and_names_show(tmp_path):
    from tests.cli_support import as_printed

    db, _dl, run_id = started_tidy(tmp_path, {"photo.jpg": b"jpg"})
    assert flowdesk(db, "answer", run_id, "yes").returncode == 0
    again = flowdesk(db, "answer", run_id, "yes")
    assert again.returncode == 1  # README: a run that cannot take it any more, as cancel
    assert f"run {run_id} is completed, not waiting for an answer; nothing was answered" in (
        again.stderr
    )
    hint = again.stderr.split("`")[1]
    shown = as_printed(hint, env=dict(os.environ))
    assert shown.returncode == 0 and "1 file: 1 moved" in shown.stdout


def test_show_of_a_big_tidy_lists_200_files_and_the_json_command_for_the_rest(tmp_path):
    from tests.cli_support import as_printed

    db, _dl, run_id = started_tidy(tmp_path, {f"n{i:03}.txt": b"n" for i in range(201)})
    answered = flowdesk(db, "answer", run_id, "no")  # nothing moves; each file says so
    assert answered.returncode == 0, answered.stderr
    assert "201 files: 201 not moved (not approved)" in answered.stdout
    shown = flowdesk(db, "show", run_id)
    listed = [ln for ln in shown.stdout.splitlines() if ln.startswith("  n")]
    assert len(listed) == 200 and all("not moved (not approved)" in ln for ln in listed)
    last = next(ln for ln in shown.stdout.splitlines() if ln.startswith("  … "))
    assert last.startswith("  … 1 more file: `") and last.endswith("` lists each")
    every = as_printed(last.split("`")[1], env=dict(os.environ))
    assert every.returncode == 0, every.stderr
    files = json.loads(every.stdout)["files"]
    assert len(files) == 201 and {f["outcome"] for f in files} == {"declined"}


def test_a_file_name_with_a_newline_takes_one_line_in_show_and_answer(tmp_path):
    """Tidy refuses a name holding a control character and lists it: the name
    shows escaped (``new\\nline.txt``) on its own line, padded like the
    others, in ``show`` and in ``answer``'s report; printed raw, its newline
    broke the table and a crafted name could forge a line such as
    ``secret.txt  moved`` for a file never moved."""
    forged = "new\n  secret.txt  moved  (copied elsewhere)"
    db, folder, run_id = started_tidy(
        tmp_path, {forged: b"x", "tab\there.txt": b"t", "plain.txt": b"p"}
    )
    shown = flowdesk(db, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    answered = flowdesk(db, "answer", run_id, "yes")
    assert answered.returncode == 0, answered.stderr
    for out in (shown.stdout, answered.stdout):
        lines = out.splitlines()
        assert not any(line.lstrip().startswith("secret.txt") for line in lines), out
        [new] = [line for line in lines if "new\\n" in line]
        assert new.startswith("  new\\n  secret.txt  moved  (copied elsewhere)  refused")
        [tab] = [line for line in lines if line.startswith("  tab")]
        assert tab.startswith("  tab\\there.txt ")
        [plain] = [line for line in lines if line.startswith("  plain.txt")]
        # the name column is as wide as the widest name as shown (capped at 40)
        assert plain[2 + 40 + 2 :].startswith(("moved", "planned"))
    assert (folder / forged).exists() and (folder / "tab\there.txt").exists()
