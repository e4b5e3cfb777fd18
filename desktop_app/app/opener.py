"""Open a run's output with the system's opener (``xdg-open`` on Linux and
the BSDs, ``open`` on macOS), as a file manager would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: state fields that name what a run made, most specific first
OUTPUT_FIELDS = ("report_path", "out", "folder")


def output_of(state: Mapping[str, Any]) -> Path | None:
    """The file or folder a run made, from its state: ``report_path``
    (digest's ``digest.md``), else its ``out`` or ``folder``; ``None`` when
    it names none that exists."""
    for field in OUTPUT_FIELDS:
        value = state.get(field)
        if isinstance(value, str) and value and Path(value).exists():
            return Path(value)
    return None


def opener() -> str | None:
    """The system opener's path (``open`` on macOS, ``xdg-open`` elsewhere), or ``None``."""
    return shutil.which("open" if sys.platform == "darwin" else "xdg-open")


def open_path(path: Path) -> str:
    """Hand ``path`` to the system opener, detached (its output goes
    nowhere, it outlives the app); returns the opener used.

    Raises:
        FileNotFoundError: no opener is installed (the message says which).
    """
    program = opener()
    if program is None:
        name = "open" if sys.platform == "darwin" else "xdg-open"
        raise FileNotFoundError(f"{name} is not installed; open {path} yourself")
    subprocess.Popen(  # a fixed program; the path is one argument, never a shell word
        [program, str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return program
