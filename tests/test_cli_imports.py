"""The parser answers before the heavy half of the app loads.

``flowdesk --version``, ``--help`` and a Tab of shell completion build the
argument parser and nothing else: pydantic(-settings), asyncio, textual,
the stores (apsw, psycopg) and the engine are imported only by the command
that needs them. Checked on the modules a real process imported, not on a
clock (which moves with the machine's load).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import loaded_modules

#: packages and modules the parser must not need (each with its submodules)
HEAVY = (
    "textual",
    "rich",
    "pydantic",
    "pydantic_settings",
    "asyncio",
    "apsw",
    "sqlite_utils",
    "psycopg",
    "httpx",
    "desktop_app.config",
    "desktop_app.bootstrap",
    "desktop_app.flow",
    "desktop_app.store.sqlite.store",
    "desktop_app.app",
)


def heavy(names: set[str]) -> list[str]:
    return sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("option", ["--version", "--help"])
def test_version_and_help_load_no_heavy_module(option):
    names, done = loaded_modules("desktop_app.cli", [option])
    assert done.returncode == 0 and done.stdout.startswith(("flowdesk ", "usage: flowdesk"))
    assert "desktop_app.cli.parser" in names  # the log is read: the parser was seen loading
    assert heavy(names) == []


def test_completing_a_command_loads_no_heavy_module(tmp_path: Path):
    answer = tmp_path / "completions"
    line = "flowdesk wat"
    names, done = loaded_modules(
        "desktop_app.cli",
        [],
        env={
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_SHELL": "bash",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        },
    )
    assert done.returncode == 0 and answer.read_text().split() == ["watch"]
    assert "argcomplete" in names
    assert heavy(names) == []


def test_a_command_still_loads_what_it_needs(tmp_path: Path):
    """The deferral is real, not a test blind spot: `db apply` opens the store."""
    names, done = loaded_modules("desktop_app.cli", ["--db", str(tmp_path / "f.db"), "db", "apply"])
    assert done.returncode == 0, done.stderr
    assert {"apsw", "pydantic_settings", "desktop_app.cli.admin"} <= names
