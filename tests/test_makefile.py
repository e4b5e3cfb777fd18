"""`make run` installs only the app; `make test` adds the test extras; the
stamps say what is installed (read from ``make -n``: what make would run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def would_run(folder: Path, target: str) -> list[str]:
    """The commands ``make TARGET`` would run in ``folder`` (``make -n``), as
    a make of its own: under ``make test`` the outer make's ``MAKEFLAGS`` and
    ``MAKELEVEL`` would add "Entering/Leaving directory" lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=folder, capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return done.stdout.splitlines()


def touch_later(path: Path) -> None:
    """Create or touch ``path`` a second after everything before it (make
    compares modification times)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    later = time.time() + 1
    os.utime(path, (later, later))


def installs(commands: list[str]) -> list[str]:
    return [c.split("install --quiet ", 1)[1] for c in commands if "pip install" in c]


def test_run_installs_the_app_only_and_test_adds_the_extras(tmp_path: Path):
    for name in ("Makefile", "pyproject.toml", "tests/mcp_servers/package-lock.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    assert installs(would_run(tmp_path, "run")) == ["--upgrade pip", "-e ."]
    assert installs(would_run(tmp_path, "test")) == ["--upgrade pip", "-e .", "-e '.[test]'"]

    touch_later(tmp_path / ".venv" / ".installed-run")  # after `make run`
    assert installs(would_run(tmp_path, "run")) == []
    assert installs(would_run(tmp_path, "test")) == ["-e '.[test]'"]

    touch_later(tmp_path / ".venv" / ".installed-test")  # after `make test`
    assert installs(would_run(tmp_path, "run")) == []
    assert installs(would_run(tmp_path, "test")) == []
    assert would_run(tmp_path, "run")[-1] == ".venv/bin/flowdesk"
    # the tests' Node MCP servers: `npm ci` from the lockfile until it succeeded once
    assert any("npm ci --prefix tests/mcp_servers" in c for c in would_run(tmp_path, "test"))
    touch_later(tmp_path / "tests/mcp_servers/node_modules/.installed")
    assert not any("npm ci" in c for c in would_run(tmp_path, "test"))

    touch_later(tmp_path / "pyproject.toml")  # a dependency changed: both again
    assert installs(would_run(tmp_path, "test")) == ["--upgrade pip", "-e .", "-e '.[test]'"]
