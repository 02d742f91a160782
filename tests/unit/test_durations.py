from datetime import timedelta

import pytest

from shared.durations import DurationError, format_seconds, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("1.5h", 5400),
        ("0s", 0),
        ("2h0m5s", 7205),
    ],
)
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "10", "-5s", "5 m", "1d", "m", "1h-5m"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59, "59s"), (60, "1m"), (3661, "1h1m1s"), (7200, "2h")])
def test_format(seconds: int, text: str) -> None:
    assert format_seconds(seconds) == text
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_format_rejects_negative() -> None:
    with pytest.raises(DurationError):
        format_seconds(-1)
