"""Durations, end times and sizes as people type them."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from gputop.analysis.durations import format_duration, parse_duration, parse_size, parse_until

BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("4h", 4 * 3600),
        ("30m", 1800),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("2d", 2 * 86400),
        ("90s", 90),
        ("1.5h", 5400),
        (" 45M ", 2700),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "4", "h", "4x", "-3h", "4h-", "0m", "1h30", "four hours"])
def test_bad_durations_say_what_to_type(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_duration(text)
    message = str(err.value)
    assert "\n" not in message
    assert "4h" in message or "longer than zero" in message


def _at(year: int, month: int, day: int, hour: int, minute: int) -> float:
    return dt.datetime(year, month, day, hour, minute, tzinfo=BERLIN).timestamp()


def test_until_later_today_and_tomorrow() -> None:
    now = _at(2026, 12, 2, 14, 0)
    assert parse_until("until 18:00", now, BERLIN) == _at(2026, 12, 2, 18, 0)
    assert parse_until("18:00", now, BERLIN) == _at(2026, 12, 2, 18, 0)
    assert parse_until("until 09:30", now, BERLIN) == _at(2026, 12, 3, 9, 30)
    assert parse_until("UNTIL   14:00", now, BERLIN) == _at(2026, 12, 3, 14, 0)


def test_until_tomorrow_across_a_dst_change_keeps_the_wall_clock() -> None:
    now = _at(2026, 3, 28, 20, 0)  # Europe/Berlin moves to summer time on 2026-03-29
    end = parse_until("until 18:00", now, BERLIN)
    assert dt.datetime.fromtimestamp(end, BERLIN).hour == 18
    assert end - now == 21 * 3600


def test_until_a_date() -> None:
    now = _at(2026, 12, 2, 14, 0)
    assert parse_until("until 2026-12-24 08:15", now, BERLIN) == _at(2026, 12, 24, 8, 15)
    with pytest.raises(ValueError, match="in the past"):
        parse_until("until 2026-12-01 08:15", now, BERLIN)
    with pytest.raises(ValueError, match="bad date"):
        parse_until("until 2026-02-30 08:15", now, BERLIN)
    with pytest.raises(ValueError, match="in the past"):  # the very minute it is now
        parse_until("until 2026-12-02 14:00", now, BERLIN)


def test_until_errors() -> None:
    now = _at(2026, 12, 2, 14, 0)
    for text in ("until", "until 25:00", "until noon", "until 18:0"):
        with pytest.raises(ValueError):
            parse_until(text, now, BERLIN)


def test_durations_count_from_now() -> None:
    assert parse_until("1h30m", 1000.0) == 1000.0 + 5400


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("20G", 20 << 30),
        ("20GiB", 20 << 30),
        ("20gb", 20 << 30),
        ("512M", 512 << 20),
        ("1.5T", int(1.5 * (1 << 40))),
        ("1000", 1000),
        ("4k", 4096),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "20X", "-1G", "twenty", "9" * 400 + "G"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="bad size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (45, "45s"),
        (14 * 60 + 3, "14m03s"),
        (3725, "1h02m"),  # the dashboard and --once once disagreed: 1:02:05 vs 1h02m
        (2 * 3600 + 5 * 60, "2h05m"),
        (3 * 86400 + 4 * 3600, "3d04h"),
        (-5, "0s"),
        (2 * 86400, "2d00h"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_duration_in_whole_minutes() -> None:
    assert format_duration(14 * 60 + 59, minutes=True) == "14m"
    assert format_duration(3725, minutes=True) == "1h02m"
