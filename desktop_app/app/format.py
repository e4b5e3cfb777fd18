"""Plain text formatting shared by the screens (no Textual, no I/O)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

from desktop_app.store.protocol import Wait

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def short_id(run_id: str) -> str:
    """The first 8 characters of a run id (what the tables show)."""
    return run_id[:8]


def when(ts: float | None) -> str:
    """UTC epoch seconds as ``YYYY-MM-DD HH:MM:SS`` (``-`` when unknown)."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime(TIME_FORMAT)


def progress(p: tuple[int, int] | None) -> str:
    """``done/total`` or ``-``."""
    return "-" if p is None else f"{p[0]}/{p[1]}"


#: Rich styles of the run statuses that need attention.
STATUS_STYLES: dict[str, str] = {
    "waiting": "bold yellow",
    "failed": "bold red",
    "timed_out": "red",
    "canceled": "dim",
}


def plural(n: int, word: str) -> str:
    """``1 run`` / ``2 runs``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def countdown(deadline: float | None, now: float) -> str:
    """Time left until ``deadline``: ``in 3h 12m``, ``in 4m 10s``, ``expired``, ``-``."""
    if deadline is None:
        return "-"
    left = math.ceil(deadline - now)
    if left <= 0:
        return "expired"
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"in {days}d {hours}h"
    if hours:
        return f"in {hours}h {minutes}m"
    if minutes:
        return f"in {minutes}m {seconds}s"
    return f"in {seconds}s"


def json_text(value: object) -> str:
    """A prompt or payload as text: strings as they are, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def wait_target(wait: Wait) -> str:
    """What a wait waits for, in words."""
    if wait.kind == "input":
        return "an answer"
    if wait.kind == "signal":
        return f"signal {wait.name} (key {wait.key})"
    if wait.kind == "event":
        return f"event {wait.name}"
    return "its timer"
