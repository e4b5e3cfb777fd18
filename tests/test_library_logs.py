"""A library's warnings go to Flowdesk's log file, never onto the terminal
in the middle of the lines Flowdesk prints there (psycopg's pool warns from
its own threads while a PostgreSQL server is unreachable; CI saw "error
connecting in 'flowdesk'" glued to the end of a printed `resume with:`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.cli_support import REPO

CHILD = """
import logging, sys
from desktop_app.config import load_settings
from desktop_app.observability import setup_logging
path = setup_logging(load_settings())
logging.getLogger("psycopg.pool").warning("error connecting in 'flowdesk': refused")
print("resume with: flowdesk resume abc", file=sys.stderr)
print(path)
"""


def test_a_pool_warning_goes_to_the_log_file_not_to_stderr(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "resume with: flowdesk resume abc\n"
    log = Path(done.stdout.strip()).read_text()
    assert "WARNING psycopg.pool" in log and "error connecting in 'flowdesk'" in log
