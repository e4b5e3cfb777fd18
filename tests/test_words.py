"""Numbers in words, as the CLI and the app both say them."""

from __future__ import annotations

import pytest

from desktop_app.app.format import countdown
from desktop_app.cli.output import due_in
from desktop_app.words import duration, listing, plural


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (12.6, "12s"),  # whole seconds, as a clock counts them
        (0.2, "1s"),  # but a part of a second left is not "0s"
        (45, "45s"),
        (60, "1m"),
        (200, "3m 20s"),
        (3600, "1h"),
        (7500, "2h 05m"),
        (86399, "23h 59m"),
        (86399.6, "23h 59m"),  # a 24 h deadline a moment after it was set
        (2 * 86400 + 3 * 3600 + 59, "2d 3h"),
        (-5, "-5s"),
    ],
)
def test_a_span_reads_like_a_person_wrote_it(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_the_cli_and_the_app_say_time_left_alike() -> None:
    now = 1_000_000.0
    left = now + 3 * 3600 + 12 * 60 + 5
    assert due_in(left, now) == countdown(left, now) == "in 3h 12m"
    assert due_in(now - 5, now) == "passed 5s ago" and countdown(now - 5, now) == "expired"


def test_counts_take_the_noun_that_fits() -> None:
    assert [plural(n, "file") for n in (0, 1, 2941)] == ["0 files", "1 file", "2,941 files"]
    assert plural(2, "entry", "entries") == "2 entries"


def test_listing_joins_with_commas_and_a_final_and() -> None:
    assert [listing(x) for x in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == [
        "",
        "a",
        "a and b",
        "a, b and c",
    ]


@pytest.mark.parametrize(
    ("tz", "local"),
    [
        ("UTC", "2026-12-07 10:14:57 UTC (local)"),
        ("Asia/Kolkata", "2026-12-07 15:44:57 IST (local)"),
        # a POSIX TZ names its zone UTC whatever its offset (a tryout: two
        # different times both read "UTC"): the offset is given instead
        ("UTC+3", "2026-12-07 07:14:57 UTC-03:00 (local)"),
        ("GMT-5", "2026-12-07 15:14:57 UTC+05:00 (local)"),
    ],
)
def test_a_moment_names_its_local_zone_by_a_name_that_tells_it_from_utc(
    tz: str, local: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from desktop_app.words import local_and_utc

    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        assert local_and_utc(1796638497.0) == f"{local}, 2026-12-07T10:14:57.000Z (UTC)"
    finally:
        monkeypatch.undo()
        time.tzset()
