import pytest

from blockx.app.duration import (HOUR, MICROSECOND, MILLISECOND, MINUTE, SECOND, DurationError,
                                 format_duration_ms, parse_duration, parse_duration_ms)


@pytest.mark.parametrize("text,ns", [
    ("0", 0),
    ("-0", 0),
    ("2s", 2 * SECOND),
    ("200ms", 200 * MILLISECOND),
    ("1m30s", 90 * SECOND),
    ("1.5h", 90 * MINUTE),
    (".5s", 500 * MILLISECOND),
    ("1.s", SECOND),
    ("-300ms", -300 * MILLISECOND),
    ("+5s", 5 * SECOND),
    ("1h2m3s4ms5us6ns", HOUR + 2 * MINUTE + 3 * SECOND + 4 * MILLISECOND + 5 * MICROSECOND + 6),
    ("3\u00b5s", 3 * MICROSECOND),
    ("3\u03bcs", 3 * MICROSECOND),
    ("0.000000001s", 1),
    ("1.0000000001s", SECOND),          # sub-nanosecond fraction truncated
    ("2562047h", 2562047 * HOUR),        # just under the int64 limit
    ("9223372036854775807ns", (1 << 63) - 1),
])
def test_parse_duration_accepts_go_syntax(text, ns):
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text,reason", [
    ("", "empty"),
    ("-", "empty"),
    ("200", 'missing unit (write e.g. "200ms" or "200s")'),
    ("1h30", "missing unit"),
    ("2x", "unknown unit 'x'"),
    ("2S", "unknown unit 'S'"),
    ("s", "expected a number"),
    ("1.2.3s", "missing unit"),
    (" 2s", "surrounding whitespace"),
    ("--1s", "expected a number"),
    ("2562048h", "out of range"),
    ("9223372036854775808ns", "out of range"),
])
def test_parse_duration_rejects_with_reason(text, reason):
    with pytest.raises(DurationError) as ei:
        parse_duration(text)
    assert reason in ei.value.reason
    assert repr(text) in str(ei.value)


def test_parse_duration_rejects_non_strings():
    with pytest.raises(DurationError, match="must be a string"):
        parse_duration(200)  # type: ignore[arg-type]


@pytest.mark.parametrize("text,ms", [("1500us", 1), ("-1500us", -1), ("999us", 0), ("2s", 2000), ("1m", 60_000)])
def test_parse_duration_ms_truncates_toward_zero(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("ms,text", [(0, "0s"), (200, "200ms"), (1500, "1.5s"), (90_000, "1m30s"),
                                     (3_600_000, "1h0m0s"), (-2000, "-2s")])
def test_format_duration_ms_is_go_style_and_round_trips(ms, text):
    assert format_duration_ms(ms) == text
    assert parse_duration_ms(text) == ms
