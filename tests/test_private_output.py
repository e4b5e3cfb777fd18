"""What Flowdesk writes for a user stays theirs and inert: every folder it
creates for user data is 0700 (parents included), every file 0600; a digest
report shows the control characters of the files it read as escapes, so
``cat digest.md`` runs nothing; a printed hint never repeats the PostgreSQL
password given in ``--db``. Real ``flowdesk`` processes under a umask of 022."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from desktop_app.flows.digest import render_report
from desktop_app.store.domain.digest import DigestFile
from desktop_app.textsafe import visible_controls
from tests import cli_forkserver
from tests.cli_support import REPO, flowdesk
from tests.pg_support import with_address

#: a title and a summary holding what a terminal would run: set the window
#: title (OSC ... BEL), clear the screen, recolour, a one-byte C1 CSI, a CR
EVIL = (
    "# Notes \x1b]0;pwned\x07 here\x1b[2J\n\n"
    "The plan is \x1b[31mred\x1b[0m today and \u009b1m bold, then a\rreturn to "
    "the work we started last week.\n"
)


def run_flowdesk(*args: str) -> subprocess.CompletedProcess[str]:
    """``flowdesk ARGS`` with the default database and log folders (under
    the test's own HOME) and the usual umask 022, in a process of its own
    (forked from tests/cli_forkserver.py, which gives the child the umask
    of the call)."""
    old = os.umask(0o022)
    try:
        return cli_forkserver.run(list(args), timeout=120, cwd=REPO)
    finally:
        os.umask(old)


def modes_under(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode)
        for p in sorted(root.rglob("*"))
        if not p.is_symlink()
    }


@pytest.mark.scenario("S56")
def test_every_folder_created_for_user_data_is_0700_and_every_file_0600(tmp_path):
    home = Path(os.environ["HOME"])
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nSome text about a thing worth a summary.\n")
    applied = run_flowdesk("db", "apply")  # the default database: ~/.local/share/flowdesk
    assert applied.returncode == 0, applied.stderr
    out = home / "reports" / "2026" / "december"  # three folders that do not exist yet
    done = run_flowdesk("run", "digest", "--folder", str(docs), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    modes = modes_under(home)
    folders = {p: m for p, m in modes.items() if (home / p).is_dir()}
    files = {p: m for p, m in modes.items() if not (home / p).is_dir()}
    # the report's folders, the log folder and the state folder above it, the data folder
    for expected in (
        "reports",
        "reports/2026",
        "reports/2026/december",
        ".local/state",
        ".local/state/flowdesk",
        ".local/state/flowdesk/log",
        ".local/share/flowdesk",
    ):
        assert expected in folders
    assert {p: oct(m) for p, m in folders.items() if m != 0o700} == {}
    assert "reports/2026/december/digest.md" in files
    assert ".local/share/flowdesk/flowdesk.db" in files
    assert {p: oct(m) for p, m in files.items() if m != 0o600} == {}


def test_an_existing_output_folder_keeps_its_mode(db_path, tmp_path):
    """A folder the user made is theirs: only folders Flowdesk creates are 0700."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nSome text.\n")
    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(0o755)
    done = flowdesk(db_path, "run", "digest", "--folder", str(docs), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "digest.md").stat().st_mode) == 0o600


def test_cat_digest_md_runs_no_escape_sequence_from_the_files_read(db_path, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "evil.md").write_text(EVIL, encoding="utf-8")
    (docs / "name\x1b[2J.txt").write_text("A file whose name clears the screen, read anyway.\n")
    out = tmp_path / "out"
    done = flowdesk(db_path, "run", "digest", "--folder", str(docs), "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = (out / "digest.md").read_bytes()
    controls = [b for b in report if (b < 0x20 and b not in b"\n\t") or b == 0x7F]
    assert controls == []  # nothing a terminal would act on
    assert "\u009b" not in report.decode("utf-8")
    text = report.decode("utf-8")
    # still all there, shown as escapes
    assert "**Notes \\x1b]0;pwned\\x07 here\\x1b[2J**" in text
    assert "\\x1b[31mred\\x1b[0m" in text and "\\x9b1m" in text
    assert "- name\\x1b[2J.txt (" in text  # listed, escaped


def test_model_text_in_a_summary_is_shown_escaped_in_the_report():
    """A model's summary is the row's summary: it goes through the same escaping."""
    row = DigestFile("a.md", "markdown", "A\x1b[8m", "Said \x1b]52;c;ZXZpbA==\x07 hi", 10)
    text = render_report("docs\x1b[H", [row])
    assert "\x1b" not in text and "\x07" not in text
    assert "# Digest of docs\\x1b[H" in text
    assert "**A\\x1b[8m**" in text and "Said \\x1b]52;c;ZXZpbA==\\x07 hi" in text


def test_visible_controls_keeps_newline_tab_and_ordinary_text_byte_for_byte():
    plain = "Ünïcode · tab\tand\nnewline, NBSP\u00a0and emoji 🙂"
    assert visible_controls(plain) == plain
    every = "".join(chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)])
    shown = visible_controls(every)
    assert "\n" in shown and "\t" in shown
    assert [c for c in shown if c not in "\n\t" and not c.isprintable()] == []
    assert shown.count("\\x") == len(every) - 2


@pytest.mark.postgres
def test_hints_never_print_the_postgres_password_given_in_db(pg_url):
    secret_url = with_address(pg_url, password="s3cret-pw")
    out = flowdesk(secret_url, "show", "ffffffff")
    assert out.returncode == 2, out.stderr
    assert "list the runs with `flowdesk --db" in out.stderr  # the hint is there
    assert "s3cret-pw" not in out.stdout + out.stderr
    # the printed command leaves the password out and says where it comes from
    assert f"--db {shlex.quote(with_address(pg_url))} " in out.stderr
    assert "leave out the database password" in out.stderr
