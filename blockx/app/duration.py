"""Go `time.ParseDuration` for configuration values such as WORKER_HEARTBEAT_INTERVAL.

The Go original reads these variables with time.ParseDuration, so the accepted
grammar is Go's: an optional sign, then one or more `<number><unit>` terms
("2s", "1m30s", "1.5h", "-300ms"); units ns, us, µs, μs, ms, s, m, h; "0" alone is
the only unit-less value. A bare integer such as "200" is rejected, as Go rejects
it, and the message says which unit to add: silently reading it as milliseconds
(or seconds) would hide a misconfiguration that changes timing by 1000x."""

from __future__ import annotations

from fractions import Fraction

NANOSECOND = 1
MICROSECOND = 1_000
MILLISECOND = 1_000_000
SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_UNITS = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # micro sign
    "\u03bcs": MICROSECOND,  # Greek mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
_MAX_NS = (1 << 63) - 1


class DurationError(ValueError):
    """A string that is not a Go duration; `reason` is the message without the value."""

    def __init__(self, text: object, reason: str):
        self.text = text
        self.reason = reason
        super().__init__(f"invalid duration {text!r}: {reason}")


def parse_duration(text: str) -> int:
    """Nanoseconds of Go duration `text`; raises DurationError with the reason."""
    if not isinstance(text, str):
        raise DurationError(text, f"must be a string like \"2s\", not {type(text).__name__}")
    orig = text
    s = text.strip()
    if s != text:
        raise DurationError(orig, "surrounding whitespace")
    neg = False
    if s[:1] in ("-", "+"):
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if s == "":
        raise DurationError(orig, "empty")
    total = Fraction(0)
    i, n = 0, len(s)
    while i < n:
        start = i
        while i < n and s[i].isdigit() and s[i].isascii():
            i += 1
        int_part = s[start:i]
        frac_part = ""
        if i < n and s[i] == ".":
            i += 1
            fstart = i
            while i < n and s[i].isdigit() and s[i].isascii():
                i += 1
            frac_part = s[fstart:i]
        if not int_part and not frac_part:
            raise DurationError(orig, f"expected a number at {s[start:]!r}")
        ustart = i
        while i < n and s[i] != "." and not (s[i].isdigit() and s[i].isascii()):
            i += 1
        unit = s[ustart:i]
        if not unit:
            hint = ""
            if not frac_part and i == n and start == 0:
                hint = f' (write e.g. "{int_part}ms" or "{int_part}s")'
            raise DurationError(orig, f"missing unit{hint}; "
                                "units are ns, us, ms, s, m, h")
        scale = _UNITS.get(unit)
        if scale is None:
            raise DurationError(orig, f"unknown unit {unit!r}; "
                                "units are ns, us, ms, s, m, h")
        value = Fraction(int(int_part or "0"))
        if frac_part:
            value += Fraction(int(frac_part), 10 ** len(frac_part))
        total += value * scale
        if total > _MAX_NS + (1 if neg else 0):
            raise DurationError(orig, "out of range (max about 292 years)")
    ns = int(total)  # Go truncates sub-nanosecond fractions
    return -ns if neg else ns


def parse_duration_ms(text: str) -> int:
    """Whole milliseconds of Go duration `text` (truncated toward zero, as Go's
    Duration.Milliseconds does)."""
    ns = parse_duration(text)
    return int(ns / MILLISECOND) if ns < 0 else ns // MILLISECOND


def format_duration_ms(ms: int) -> str:
    """A Go-style duration string for `ms` milliseconds ("1m30s", "200ms", "0s")."""
    if ms == 0:
        return "0s"
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    hours, rem = divmod(ms, 3_600_000)
    minutes, rem = divmod(rem, 60_000)
    seconds = Fraction(rem, 1000)
    out = sign
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    sec_text = f"{float(seconds):.3f}".rstrip("0").rstrip(".")
    return out + f"{sec_text}s"
