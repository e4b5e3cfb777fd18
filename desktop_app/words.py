"""Numbers in words: counts (``1 file``, ``2,941 files``, never ``1 files``
nor ``file(s)``), lists (``a, b and c``) and spans of time (``4m 10s``), the
one place the CLI and the app say them."""

from __future__ import annotations

import math
from collections.abc import Sequence


def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` with the noun that fits it: ``plural(1, "file")`` is ``"1 file"``,
    ``plural(2941, "file")`` ``"2,941 files"``; ``many`` when the plural is not
    ``one + "s"`` (``plural(2, "entry", "entries")``)."""
    return f"{n:,} {one if n == 1 else (many if many is not None else one + 's')}"


def listing(items: Sequence[str]) -> str:
    """``items`` as a sentence's list: ``"a"``, ``"a and b"``, ``"a, b and
    c"`` (``""`` for none)."""
    if len(items) < 2:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def duration(seconds: float) -> str:
    """A span of ``seconds`` read at a glance: ``45s``, ``4m 10s``,
    ``2h 05m``, ``3d 4h``, a whole unit alone (``1d``, ``2h``, ``1m``);
    ``-5s`` for a negative span (a clock that moved back). Whole seconds
    rounded down, as a clock counts them (a deadline 24 h away reads ``23h
    59m`` a moment after it is set, not ``1d``), but a part of a second
    left reads ``1s``, never ``0s``."""
    s = math.floor(abs(seconds)) or math.ceil(abs(seconds))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        text = f"{days}d {hours}h" if hours else f"{days}d"
    elif hours:
        text = f"{hours}h {minutes:02d}m" if minutes else f"{hours}h"
    elif minutes:
        text = f"{minutes}m {secs:02d}s" if secs else f"{minutes}m"
    else:
        text = f"{secs}s"
    return f"-{text}" if seconds < 0 and s else text


def local_and_utc(ts: float) -> str:
    """``2026-12-04 17:25:43 IST (local), 2026-12-04T11:55:43.120Z (UTC)``:
    UTC epoch seconds ``ts`` (float) in the machine's time zone (``TZ``) and
    in UTC (milliseconds), the way a deadline reads wherever a person sees
    one. A time past what :mod:`datetime` can show (``1e12``, ``inf``) reads
    as its epoch seconds, never an error. Raises nothing."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromtimestamp(ts, UTC)
    except (ValueError, OverflowError, OSError):
        return f"{ts:.3f} (UTC epoch seconds)"
    utc = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    try:
        here = moment.astimezone()
    except (ValueError, OverflowError, OSError):
        return f"{utc} (UTC)"
    zone, offset = f"{here:%Z}", here.utcoffset()
    if zone in ("UTC", "GMT") and offset:  # a POSIX TZ such as UTC+3 names its zone UTC
        z = f"{here:%z}"  # -0300
        zone = f"UTC{z[:3]}:{z[3:5]}"
    return f"{here:%Y-%m-%d %H:%M:%S} {zone} (local), {utc} (UTC)"


def step_status_text(step: str, run: str) -> str:
    """A step's status as ``show`` and the app's detail say it: a step left
    ``in_progress`` or ``waiting`` by a run that was canceled or timed out
    was cut off by that end, and reads ``canceled`` or ``timed_out`` (the
    run's status), not as if it still ran. Any other pair reads as stored
    (``show -o json`` gives the stored record's status)."""
    if step in ("in_progress", "waiting") and run in ("canceled", "timed_out"):
        return run
    return step
