"""Saving settings from the app keeps the file's comments and key order (tomlkit)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from desktop_app.app.screens.settings import save_settings

ORIGINAL = """\
# Flowdesk settings, written by hand.
db_path = "/data/flowdesk.db"  # on the big disk
flows = ["mine.flows:all"]

# The model server at home.
[model]
base_url = "http://old/v1"
model = "llama"  # small and quick

[recovery]
digest = "ask"
"""


def test_saving_keeps_comments_order_and_other_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(ORIGINAL)
    save_settings(
        path,
        {"recover_on_launch": False, "flows": None},
        {"base_url": "http://new/v1", "timeout_s": 30.0},
    )
    text = path.read_text()
    for comment in (
        "# Flowdesk settings, written by hand.",
        "# on the big disk",
        "# The model server at home.",
        "# small and quick",
    ):
        assert comment in text
    data = tomllib.loads(text)
    assert data == {
        "db_path": "/data/flowdesk.db",
        "recover_on_launch": False,
        "model": {"base_url": "http://new/v1", "model": "llama", "timeout_s": 30.0},
        "recovery": {"digest": "ask"},
    }
    # the order of what was there is kept: db_path first, [model] before [recovery]
    assert text.index("db_path") < text.index("[model]") < text.index("[recovery]")


def test_a_new_file_gets_the_keys(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "config.toml"
    path.parent.mkdir()
    save_settings(path, {"synchronous": "FULL"}, {"model": "m"})
    assert tomllib.loads(path.read_text()) == {"synchronous": "FULL", "model": {"model": "m"}}
