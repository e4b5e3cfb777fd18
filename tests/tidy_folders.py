"""Folders for the tidy tests: fill one with small text files, then see
which are still at its top level and which tidy moved into subfolders."""

from __future__ import annotations

from pathlib import Path


def fill(folder: Path, n: int) -> dict[str, str]:
    """Create ``folder`` with ``n`` text files ``f0.txt`` … (each holding its
    number); their names and texts."""
    folder.mkdir()
    for i in range(n):
        (folder / f"f{i}.txt").write_text(f"{i}\n")
    return {f"f{i}.txt": f"{i}\n" for i in range(n)}


def top_files(folder: Path) -> dict[str, str]:
    """The folder's visible top-level files and their text."""
    return {
        p.name: p.read_text()
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".")
    }


def tidied(folder: Path) -> list[Path]:
    """Files below the folder's subfolders: where tidy moved them."""
    return [p for p in folder.rglob("*") if p.is_file() and p.parent != folder]
