"""A database file damaged on disk (pages overwritten, as a failing disk or a
stray `dd` leaves it), read by the real CLI: every command that meets the
damage says the file is corrupt and to restore a backup, `doctor` reports
it as its finding, and `export` leaves nothing half-written.

Two kinds of damage, on a copy of one completed digest run (hundreds of
checkpoints): 8 KiB of random bytes over two pages in the middle of the file
(what `dd if=/dev/urandom ... conv=notrunc` does), and a page whose 8-byte
header survived but whose cells are random (before ``cell_size_check`` such
a page read as holding no rows: `show` said the run's checkpoint was
"pruned or never saved", `runs` listed nothing).
"""

from __future__ import annotations

import os
import random
import shutil
import stat
from pathlib import Path

import apsw
import pytest

from tests.cli_support import as_printed, flowdesk
from tests.digest_corpus import make_corpus

PAGE = 4096


def _corrupt(db: Path) -> str:
    return (
        f"flowdesk: the database ({db}) is corrupt: database disk image is malformed. "
        "Restore it from a backup; what met the damage wrote nothing.\n"
        f"check the whole file with: flowdesk --db {db} doctor\n"
    )


@pytest.fixture(scope="module")
def digested(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A database holding one completed digest run of 300 files, its WAL
    written back into the file; (path, run id)."""
    root = tmp_path_factory.mktemp("digested")
    db = root / "f.db"
    make_corpus(root / "src", 300)
    assert flowdesk(db, "db", "apply").returncode == 0
    done = flowdesk(
        db, "run", "digest", "--folder", str(root / "src"), "--out", str(root / "o"), "--quiet"
    )
    assert done.returncode == 0, done.stderr
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    ((count,),) = conn.execute("SELECT count(*) FROM checkpoints")
    conn.close()
    assert count > 300 and db.stat().st_size > 90 * PAGE
    return db, done.stdout.splitlines()[0]


def _copy(digested: tuple[Path, str], tmp_path: Path) -> Path:
    db = tmp_path / "mid.db"
    shutil.copy(digested[0], db)
    return db


def _overwrite_middle(db: Path) -> None:
    """`dd if=/dev/urandom of=DB bs=4096 seek=N count=2 conv=notrunc`, N the
    middle leaf page of ``checkpoints`` (most of a digested file's pages;
    the tryout's N, half the page count, lands elsewhere as the schema
    grows), seeded bytes, so every run damages the same way."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        leaves = [
            int(p)
            for (p,) in conn.execute(
                "SELECT pageno FROM dbstat WHERE name='checkpoints' AND pagetype='leaf' "
                "ORDER BY path"
            )
        ]
    finally:
        conn.close()
    _write_random(db, leaves[len(leaves) // 2], 2)


def _overwrite_index_pages(db: Path, *indexes: str) -> None:
    """The page of each of ``indexes`` (one-page indexes of a digested file)
    overwritten with random bytes: damage SQLite's quick_check reports
    problem by problem (damaged table pages more often stop the check
    itself: that case has its own test below)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        pages = [
            int(next(iter(conn.execute("SELECT pageno FROM dbstat WHERE name=?", (i,))))[0])
            for i in indexes
        ]
    finally:
        conn.close()
    for page in pages:
        _write_random(db, page, 1)


def _overwrite_every_page(db: Path, name: str) -> None:
    """Every page of table or index ``name`` overwritten with random bytes."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        pages = [int(p) for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name=?", (name,))]
    finally:
        conn.close()
    assert pages, name
    for page in pages:
        _write_random(db, page, 1)


def _write_random(db: Path, pageno: int, count: int) -> None:
    """`dd if=/dev/urandom of=DB bs=4096 seek=pageno-1 count=COUNT
    conv=notrunc`, seeded bytes, so every run damages the same way."""
    with open(db, "r+b") as f:
        f.seek((pageno - 1) * PAGE)
        f.write(random.Random(7).randbytes(count * PAGE))


def _scramble_cells(db: Path, pageno: int) -> None:
    """Page ``pageno`` (1-based) keeps its 8-byte b-tree header; the rest is random."""
    with open(db, "r+b") as f:
        f.seek((pageno - 1) * PAGE + 8)
        f.write(random.Random(pageno).randbytes(PAGE - 8))


def _last_leaf(db: Path, table: str) -> int:
    """The page of ``table``'s b-tree holding its largest keys (a run's head
    checkpoint, for ``checkpoints``)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        ((pageno,),) = conn.execute(
            "SELECT pageno FROM dbstat WHERE name=? AND pagetype='leaf' ORDER BY path DESC LIMIT 1",
            (table,),
        )
    finally:
        conn.close()
    return int(pageno)


@pytest.mark.scenario("S98")
def test_doctor_reports_a_damaged_file_as_its_finding(digested, tmp_path):
    db = _copy(digested, tmp_path)
    _overwrite_index_pages(db, "runs_live_flow_key", "waits_deadline")
    out = flowdesk(db, "doctor")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and out.stderr == "", out.stderr
    (check,) = [ln for ln in out.stdout.splitlines() if "quick_check" in ln]
    assert check.startswith("BAD  quick_check        Tree "), out.stdout  # SQLite's first problem
    assert check.endswith(
        " more problem): the file is corrupt. Restore it from a backup (stop every Flowdesk "
        "process using it first); Flowdesk cannot repair it, and commands that read a "
        "damaged page stop, saying the database is corrupt"
    ), check
    after = out.stdout.splitlines().index(check) + 1
    assert out.stdout.splitlines()[after].startswith("ok   free disk")  # one line, then the rest
    assert "ok   schema             all applied" in out.stdout  # the checks before it ran
    intact = flowdesk(digested[0], "doctor")
    assert "ok   quick_check        ok" in intact.stdout


@pytest.mark.scenario("S98")
def test_doctor_reports_damage_that_stops_quick_check_itself(digested, tmp_path):
    """SQLite's quick_check raises "database disk image is malformed" part-way
    (it was a traceback): the doctor reports what SQLite said."""
    db = _copy(digested, tmp_path)
    _scramble_cells(db, _last_leaf(db, "checkpoints"))
    out = flowdesk(db, "doctor")
    assert out.returncode == 1 and out.stderr == "", out.stderr
    assert (
        "BAD  quick_check        database disk image is malformed: the file is corrupt. "
        "Restore it from a backup (stop every Flowdesk process using it first); Flowdesk "
        "cannot repair it, and commands that read a damaged page stop, saying the "
        "database is corrupt\n"
    ) in out.stdout, out.stdout


@pytest.mark.scenario("S98")
def test_show_of_a_run_whose_checkpoint_page_is_damaged_says_the_file_is_corrupt(
    digested, tmp_path
):
    db = _copy(digested, tmp_path)
    run_id = digested[1]
    _scramble_cells(db, _last_leaf(db, "checkpoints"))
    shown = flowdesk(db, "show", run_id)
    assert shown.returncode == 1
    assert shown.stderr == _corrupt(db), shown.stderr  # not "pruned or never saved"
    # `runs` reads the runs table only, whose page is intact: it lists the run
    listed = flowdesk(db, "runs", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout


@pytest.mark.scenario("S98")
def test_runs_reading_a_damaged_page_says_the_file_is_corrupt(digested, tmp_path):
    db = _copy(digested, tmp_path)
    _scramble_cells(db, _last_leaf(db, "runs"))
    listed = flowdesk(db, "runs")
    assert listed.returncode == 1  # not an empty list
    assert listed.stderr == _corrupt(db), listed.stderr
    assert digested[1] not in listed.stdout


def _exported(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in folder.iterdir()}


@pytest.mark.scenario("S98")
def test_export_of_a_file_damaged_in_the_middle_writes_nothing(digested, tmp_path):
    db = _copy(digested, tmp_path)
    _overwrite_middle(db)
    fresh = tmp_path / "exp"
    failed = flowdesk(db, "export", "--out", str(fresh))
    assert failed.returncode == 1
    assert failed.stderr.startswith(f"flowdesk export: cannot read {db}: "), failed.stderr
    assert failed.stderr.endswith("; nothing was written\n") and len(failed.stderr) < 400
    assert not fresh.exists()  # no runs.json left behind, nor the folder made for it


@pytest.mark.scenario("S98")
def test_export_of_a_damaged_file_writes_nothing(digested, tmp_path):
    """The damaged page is read after runs.json was written (checkpoints
    come second); before ``cell_size_check`` it read as holding no rows and
    the export "succeeded" without the run's last checkpoints."""
    db = _copy(digested, tmp_path)
    earlier = tmp_path / "earlier"  # a folder holding an export of the file while intact
    assert flowdesk(db, "export", "--out", str(earlier)).returncode == 0
    _scramble_cells(db, _last_leaf(db, "checkpoints"))
    fresh = tmp_path / "exp"
    failed = flowdesk(db, "export", "--out", str(fresh))
    assert failed.returncode == 1
    assert failed.stderr == (
        f"flowdesk export: cannot read {db}: database disk image is malformed (the file is "
        "corrupt: restore it from a backup); nothing was written\n"
    )
    assert not fresh.exists()  # no runs.json left behind, nor the folder made for it
    before = _exported(earlier)
    assert {mode for _, mode in before.values()} == {0o600}
    assert "runs.json" in before and "checkpoints.json" in before
    again = flowdesk(db, "export", "--out", str(earlier))
    assert again.returncode == 1, again.stderr
    assert _exported(earlier) == before  # every file as it was, no temporary file left


def test_export_of_an_intact_file_writes_every_table_0600(digested, tmp_path):
    out = tmp_path / "deep" / "exp"
    done = flowdesk(digested[0], "export", "--out", str(out), "--format", "csv")
    assert done.returncode == 0, done.stderr
    files = _exported(out)
    assert sorted(files) == sorted(
        [
            f"{t}.csv"
            for t in (
                "runs",
                "checkpoints",
                "waits",
                "signals",
                "events",
                "outbox",
                "agent_runs",
                "agent_messages",
                "agent_tool_results",
                "langgraph_threads",
                "digest_files",
                "tidy_moves",
                "tidy_undos",
            )
        ]
        + ["flowdesk-export.json"]
    )
    assert {mode for _, mode in files.values()} == {0o600}
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert len(files["digest_files.csv"][0].decode().splitlines()) == 301  # header + 300


# -- `run digest --out` refused: nothing created ------------------------------


def test_run_digest_refused_for_a_missing_database_creates_no_output_folder(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    out = tmp_path / "out"
    refused = flowdesk(
        tmp_path / "a.db", "run", "digest", "--folder", str(tmp_path / "src"), "--out", str(out)
    )
    assert refused.returncode == 1
    assert "db apply` first" in refused.stderr, refused.stderr
    assert not out.exists() and not (tmp_path / "a.db").exists()


def test_run_digest_makes_a_missing_output_folder_only_when_it_runs(tmp_path):
    db = tmp_path / "a.db"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    (tmp_path / "file").write_text("x")
    assert flowdesk(db, "db", "apply").returncode == 0
    under_file = tmp_path / "file" / "out"
    refused = flowdesk(
        db, "run", "digest", "--folder", str(tmp_path / "src"), "--out", str(under_file)
    )
    assert refused.returncode == 2
    assert refused.stderr == (
        f"flowdesk: cannot create the output folder {under_file}: {tmp_path / 'file'} is not "
        "a folder; choose another\n"
    )
    out = tmp_path / "new" / "out"
    done = flowdesk(db, "run", "digest", "--folder", str(tmp_path / "src"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "digest.md").is_file()
    assert stat.S_IMODE(out.stat().st_mode) == stat.S_IMODE((tmp_path / "new").stat().st_mode)
    assert stat.S_IMODE(out.stat().st_mode) == 0o700


@pytest.mark.scenario("S98")
def test_a_run_that_meets_the_damage_prints_doctor_not_a_resume_that_meets_it_again(
    digested, tmp_path
):
    """A new tryout's digest on a file damaged in the middle: the run was
    stored, then a write met the damage. The message said "Flowdesk did not
    write to it" (it had: the run) and printed `resume with: ...`, which met
    the damage again and printed itself again. Now: what met the damage
    wrote nothing, the run stopped at its last saved checkpoint, and the
    `doctor` printed (run as printed) names the damage."""
    db = _copy(digested, tmp_path)
    # the pages of digest_files' unique index: a new run's creation does not
    # read them, its first step's writes do
    _overwrite_every_page(db, "sqlite_autoindex_digest_files_1")
    make_corpus(tmp_path / "src", 200)
    out = flowdesk(
        db, "run", "digest", "--folder", str(tmp_path / "src"), "--out", str(tmp_path / "o")
    )
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and "resume" not in out.stderr, out.stderr
    run_id = out.stdout.splitlines()[0]
    lines = out.stderr.splitlines()
    assert lines[-3:] == [
        *_corrupt(db).splitlines()[:1],
        f"run {run_id} stopped at its last checkpoint that was saved",
        f"check the whole file with: flowdesk --db {db} doctor",
    ], out.stderr
    doctor = as_printed(lines[-1].split(": ", 1)[1], dict(os.environ))
    assert doctor.returncode == 1, doctor.stdout
    assert "BAD  quick_check" in doctor.stdout and "the file is corrupt" in doctor.stdout


# -- the command line's net for an apsw error no store translated -------------


def test_an_untranslated_corrupt_error_is_printed_as_the_typed_error(tmp_path, capsys):
    """A read outside the stores' guards (the doctor's quick_check was one)
    that meets a damaged page prints the corrupt-file message, not a
    traceback; any other exception stays a traceback."""
    from desktop_app.cli import Ctx, _handle
    from desktop_app.cli.parser import build_parser

    db = tmp_path / "f.db"
    argv = ["--db", str(db), "runs"]
    ctx = Ctx(build_parser().parse_args(argv))

    def damaged(_ctx: object) -> int:
        raise apsw.CorruptError("database disk image is malformed")

    assert _handle(ctx, damaged, argv) == 1
    assert capsys.readouterr().err == _corrupt(db)

    def buggy(_ctx: object) -> int:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        _handle(ctx, buggy, argv)


@pytest.mark.postgres
@pytest.mark.scenario("S98")
def test_db_copy_of_a_damaged_file_copies_nothing(digested, tmp_path, pg_url):
    """It was a traceback (apsw.CorruptError out of the copy); now the
    typed message, and the server's transaction rolled back."""
    import psycopg

    db = _copy(digested, tmp_path)
    _scramble_cells(db, _last_leaf(db, "checkpoints"))
    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url)
    assert copied.returncode == 1, copied.stdout
    assert copied.stderr == _corrupt(db), copied.stderr
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM flowdesk.runs), "
            "(SELECT count(*) FROM flowdesk.checkpoints)"
        ).fetchone()
    assert row == (0, 0)
