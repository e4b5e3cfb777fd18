"""Packaging basics: a LICENSE that matches ``pyproject.toml``, and a wheel
built from this checkout that installs into a clean venv (dependencies from
the configured package index) and gives a working ``flowdesk``."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_license_file_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "MIT"}
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 Flowdesk developers" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{cmd}\n{out.stdout}\n{out.stderr}"
    return out


@pytest.mark.slow
def test_a_wheel_installs_into_a_clean_venv_and_runs(tmp_path):
    # no FLOWDESK_* or PYTHONPATH leaks from the test run into the installed tool
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wheels = tmp_path / "wheels"
    run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(wheels)],
        tmp_path,
        env,
    )
    (wheel,) = wheels.glob("flowdesk-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        licence = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert zf.read(licence).decode() == (REPO / "LICENSE").read_text()
        assert "desktop_app/schema/core/0001_runs_checkpoints.sql" in names
        assert not any(n.startswith("tests/") for n in names)

    venv = tmp_path / "venv"
    # a venv without pip of its own (quicker); this run's pip installs into it,
    # without byte-compiling the dependencies (most of an install's CPU; the
    # few modules flowdesk imports below are compiled as they are imported)
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    py = venv / "bin" / "python"
    install = ["install", "-q", "--no-compile", str(wheel)]
    run(
        [sys.executable, "-m", "pip", "--python", str(py), *install],
        tmp_path,
        env,
    )

    where = run([str(py), "-c", "import desktop_app; print(desktop_app.__file__)"], tmp_path, env)
    assert Path(where.stdout.strip()).is_relative_to(venv)  # not this checkout
    flowdesk = str(venv / "bin" / "flowdesk")
    version = run([flowdesk, "--version"], tmp_path, env)
    assert version.stdout.strip() == "flowdesk 0.1.0"
    applied = run([flowdesk, "--db", "tmp.db", "db", "apply"], tmp_path, env)
    assert "applied core/0001_runs_checkpoints.sql" in applied.stdout
    assert (tmp_path / "tmp.db").exists()
    status = run([flowdesk, "--db", "tmp.db", "db", "status"], tmp_path, env)
    assert "pending" not in status.stdout
    # installed from a wheel, an extra it lacks is installed from a package index
    pg = subprocess.run(
        [flowdesk, "--db", "postgresql://flowdesk@127.0.0.1/flowdesk", "runs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert pg.returncode == 2, pg.stdout + pg.stderr
    assert "not installed: pip install 'flowdesk[postgres]' (or give" in pg.stderr, pg.stderr
