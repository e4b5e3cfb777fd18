"""Generate a folder of files for the digest tests: prose, code, nested, binary."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = [
    "durable",
    "execution",
    "checkpoint",
    "resume",
    "crash",
    "laptop",
    "sleeps",
    "reboot",
    "agent",
    "flow",
    "step",
    "state",
    "outbox",
    "deadline",
    "signal",
    "lease",
    "revision",
    "history",
    "replay",
    "fork",
    "approval",
    "wait",
    "engine",
    "sqlite",
    "journal",
    "commit",
    "transaction",
    "process",
    "recovery",
    "idempotent",
    "retry",
]


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
    return " ".join(words).capitalize() + "."


def paragraph(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(2, 5)))


def make_corpus(root: Path, n: int, seed: int = 7) -> list[str]:
    """Write ``n`` files under ``root``; returns their relative paths."""
    rng = random.Random(seed)
    paths: list[str] = []
    for i in range(n):
        sub = root / f"part{i % 7}" / (f"deep{i % 3}" if i % 5 == 0 else "")
        sub.mkdir(parents=True, exist_ok=True)
        kind = i % 6
        if kind == 0:
            p = sub / f"note{i}.md"
            p.write_text(f"# Note {i}\n\n{paragraph(rng)}\n\n{paragraph(rng)}\n")
        elif kind == 1:
            p = sub / f"text{i}.txt"
            p.write_text(f"Plain text {i}\n\n{paragraph(rng)}\n")
        elif kind == 2:
            p = sub / f"mod{i}.py"
            p.write_text(f'"""Module {i}: {sentence(rng)}"""\n\n\ndef f{i}():\n    return {i}\n')
        elif kind == 3:
            p = sub / f"doc{i}.rst"
            p.write_text(f"Doc {i}\n{'=' * (len(str(i)) + 4)}\n\n{paragraph(rng)}\n")
        elif kind == 4:
            p = sub / f"blob{i}.bin"
            p.write_bytes(bytes(rng.randrange(256) for _ in range(512)) + b"\x00")
        else:
            p = sub / f"code{i}.js"
            p.write_text(f"// Widget {i}. {sentence(rng)}\nfunction w{i}() {{ return {i}; }}\n")
        paths.append(p.relative_to(root).as_posix())
    return sorted(paths)
