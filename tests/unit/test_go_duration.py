"""The one Go duration parser every dialect uses, against Go's `time.ParseDuration`."""

from __future__ import annotations

import pytest

from turnout.dialects.fields import go_duration_seconds, parse_go_duration

S = 1_000_000_000
MS = 1_000_000


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        # Go's documented and tested examples (time/time_test.go).
        ("0", 0),
        ("5s", 5 * S),
        ("30s", 30 * S),
        ("1478s", 1478 * S),
        ("-5s", -5 * S),
        ("+5s", 5 * S),
        ("-0", 0),
        ("+0", 0),
        ("5.0s", 5 * S),
        ("5.6s", 5 * S + 600 * MS),
        ("5.s", 5 * S),
        (".5s", S // 2),
        ("1.0s", S),
        ("1.00s", S),
        ("1.004s", S + 4 * MS),
        ("1.0040s", S + 4 * MS),
        ("100.00100s", 100 * S + 1 * MS),
        ("10ns", 10),
        ("11us", 11_000),
        ("12µs", 12_000),  # U+00B5
        ("12μs", 12_000),  # U+03BC
        ("13ms", 13 * MS),
        ("14s", 14 * S),
        ("15m", 15 * 60 * S),
        ("16h", 16 * 3600 * S),
        ("3h30m", (3 * 3600 + 30 * 60) * S),
        ("10.5s4m", 4 * 60 * S + 10 * S + 500 * MS),
        ("-2m3.4s", -(2 * 60 * S + 3 * S + 400 * MS)),
        ("1h2m3s4ms5us6ns", 3723 * S + 4 * MS + 5_000 + 6),
        ("39h9m14.425s", (39 * 3600 + 9 * 60 + 14) * S + 425 * MS),
        ("52763797000ns", 52763797000),
        ("0.3333333333333333333h", 20 * 60 * S),
        ("9007199254740993ns", (1 << 53) + 1),
        ("9223372036854775807ns", (1 << 63) - 1),
        ("9223372036854775.807us", (1 << 63) - 1),
        ("-9223372036854775808ns", -(1 << 63)),
        ("300ms", 300 * MS),
        ("-1.5h", -5400 * S),
        ("2h45m", (2 * 3600 + 45 * 60) * S),
        ("1.5µs", 1_500),
        ("1h1m1s1ms1us1ns", 3661 * S + 1_001_001),
        ("-1.5m", -90 * S),
    ],
)
def test_go_durations_are_nanoseconds(text: str, nanos: int) -> None:
    assert parse_go_duration(text) == nanos
    assert go_duration_seconds(text) == pytest.approx(nanos / S)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("3", 'time: missing unit in duration "3"'),
        ("1", 'time: missing unit in duration "1"'),
        ("600", 'time: missing unit in duration "600"'),
        ("-", 'time: invalid duration "-"'),
        ("s", 'time: invalid duration "s"'),
        (".", 'time: invalid duration "."'),
        ("-.", 'time: invalid duration "-."'),
        (".s", 'time: invalid duration ".s"'),
        ("+.s", 'time: invalid duration "+.s"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("1x", 'time: unknown unit "x" in duration "1x"'),
        ("1S", 'time: unknown unit "S" in duration "1S"'),
        ("1s ", 'time: unknown unit "s " in duration "1s "'),
        ("1.2.3s", 'time: missing unit in duration "1.2.3s"'),
        ("1h-1m", 'time: unknown unit "h-" in duration "1h-1m"'),
        ("infinity", 'time: invalid duration "infinity"'),
        ("3000000h", 'time: invalid duration "3000000h"'),  # past Go's int64 nanoseconds
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("9223372036854775.808us", 'time: invalid duration "9223372036854775.808us"'),
        ('1"s', 'time: unknown unit "\\"s" in duration "1\\"s"'),
        ("1é", 'time: unknown unit "\\xc3\\xa9" in duration "1\\xc3\\xa9"'),
    ],
)
def test_go_duration_errors_are_gos(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_go_duration(text)
    assert str(err.value) == message
    assert go_duration_seconds(text) is None


def test_seconds_are_exact_at_the_int64_edge() -> None:
    assert go_duration_seconds("2562047h") == 2562047 * 3600
    assert go_duration_seconds("150ms") == 0.15
    assert go_duration_seconds("10us") == 1e-5
