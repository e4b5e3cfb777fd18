"""Plain text formatting shared by the screens (no Textual, no I/O)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from desktop_app.errors import ClockSkewError, FlowVersionMismatchError
from desktop_app.flow.clock import SKEW_RECHECK_S
from desktop_app.store.protocol import Wait
from desktop_app.textsafe import one_line
from desktop_app.words import duration
from desktop_app.words import plural as plural  # one formatter of counts, the CLI's too

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


#: A Flowdesk run id (32 lower-case hex digits, ``uuid.hex``), alone or
#: before ``:`` (a checkpoint ``<run>:<revision>``, a child ``<run>:<path>``).
FLOWDESK_ID = re.compile(r"[0-9a-f]{32}(?=:|$)")


def short_id(run_id: str) -> str:
    """What the tables show of an id: the first 8 characters of a Flowdesk
    run id (:data:`FLOWDESK_ID`; a prefix the CLI takes, unique in
    practice), any other id whole (a LangGraph thread id: ``release-42``
    and ``release-43`` share any prefix), on one line with its control
    characters escaped (a chosen id may hold an ESC that would colour the
    terminal)."""
    return run_id[:8] if FLOWDESK_ID.match(run_id) else one_line(run_id)


def when(ts: float | None) -> str:
    """UTC epoch seconds as ``YYYY-MM-DD HH:MM:SS`` in the local time zone
    (``-`` when unknown): every time the app shows is local, the zone's
    offset said once where a run's times are (:func:`local_when`)."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).astimezone().strftime(TIME_FORMAT)


def progress(p: tuple[int, int] | None) -> str:
    """``done/total`` or ``-``."""
    return "-" if p is None else f"{p[0]}/{p[1]}"


#: Rich styles of the run statuses that need attention.
STATUS_STYLES: dict[str, str] = {
    "waiting": "bold yellow",
    "failed": "bold red",
    "timed_out": "red",
    "canceled": "dim",
    "interrupted": "bold magenta",
}


def countdown(deadline: float | None, now: float) -> str:
    """Time left until ``deadline`` (UTC epoch seconds): ``in 3h 12m``,
    ``in 4m 10s`` (:func:`~desktop_app.words.duration`), ``expired``, ``-``."""
    if deadline is None:
        return "-"
    left = deadline - now
    return f"in {duration(left)}" if left > 0 else "expired"


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


#: Characters of a text bar: filled, empty.
BAR_FULL, BAR_EMPTY = "█", "░"


def bar(fraction: float, width: int = 10) -> str:
    """A text bar ``width`` cells wide, ``fraction`` (clamped to 0..1) filled."""
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return BAR_FULL * filled + BAR_EMPTY * (width - filled)


def time_left_bar(
    asked_at: float | None, deadline: float | None, now: float, width: int = 10
) -> str:
    """How much of a wait's time is left, as a bar (``""`` without a deadline)."""
    if deadline is None or asked_at is None or deadline <= asked_at:
        return ""
    return bar((deadline - now) / (deadline - asked_at), width)


def local_when(ts: float | None) -> str:
    """UTC epoch seconds in the local time zone: ``YYYY-MM-DD HH:MM:SS +0200``."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).astimezone().strftime(TIME_FORMAT + " %z")


def ago(ts: float | None, now: float) -> str:
    """How long ago ``ts`` was: ``just now``, ``42 s ago``, ``3 min ago``,
    ``5 h ago``, ``2 d ago`` (``-`` when unknown; ``in …`` for the future)."""
    if ts is None:
        return "-"
    delta = now - ts
    if abs(delta) < 5:
        return "just now"
    if delta < 0:
        return countdown(ts, now)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if delta >= size:
            return f"{int(delta // size)} {unit} ago"
    return f"{int(delta)} s ago"


def app_version_refusal(
    exc: FlowVersionMismatchError, *, live: bool = True, again: str = "r"
) -> str:
    """A run refused because its flow changed since it started, as the app
    says it: what happened, then what works here. ``live``: the run has not
    ended (``again``, the key refused, pressed again once the flow's code is
    restored: ``r`` to resume, ``a`` to answer; ``c`` to cancel it; the
    launch report); otherwise a replay or fork was refused (``p``/``f``
    again once the code is restored)."""
    if not live:
        return (
            f"{exc.what} Replay and fork start from the flow's code as it was when the run "
            f"ran: restore it (the steps that make version {exc.stored}), then press p or f "
            "again."
        )
    return (
        f"{exc.what} Restore the flow's code as it was then (the steps that make version "
        f"{exc.stored}) and press {again} again, or press c to cancel it; the launch report at the "
        "next launch offers to continue it as a new run of the new version, or to fail it."
    )


def skew_notice(skew: ClockSkewError) -> str:
    """What the app says while its clock is skewed (banner, notice, refusals)."""
    way = "ahead of" if skew.skew_s > 0 else "behind"
    return (
        f"This computer's clock is {abs(skew.skew_s):,.0f} s {way} the clock of {skew.where} "
        f"(more than {skew.tolerance_s:g} s): runs are shown read-only; answering, starting, "
        "resuming and canceling are refused, and no timer or deadline is fired. Set the "
        "system clock right (or start Flowdesk without faketime): the app notices within "
        f"{SKEW_RECHECK_S:g} s and goes on."
    )
