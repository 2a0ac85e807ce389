"""Units written as strings in experiment files: "250us", "20ms", "10s", "2m", "10mbit".

Every parser returns a plain float in the unit its name says, or raises ValueError whose
message says what forms are accepted.
"""

import re

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_DURATION_RE = re.compile(rf"^\s*{_NUM}\s*(ns|us|µs|ms|s|m|h)?\s*$")
_DURATION_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_RATE_RE = re.compile(rf"^\s*{_NUM}\s*(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)?\s*$", re.I)
_RATE_BPS = {
    "bit": 1.0,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "bps": 8.0,
    "kbps": 8e3,
    "mbps": 8e6,
    "gbps": 8e9,
}
_PCT_RE = re.compile(rf"^\s*{_NUM}\s*(%)?\s*$")

DURATION_FORMS = 'a number with a unit: "250us", "20ms", "1.5s", "2m" (a bare number means seconds)'
RATE_FORMS = 'a number with a unit: "10mbit", "500kbit", "1gbit" (bits/s) or "1mbps" (bytes/s)'
PCT_FORMS = '0.01 or "1%"'


def _number(value: str | float | int, what: str, forms: str, pattern: re.Pattern):
    """(number, unit or None) of value: a bare int or float has no unit, a string must match
    `pattern` (its groups: the number, the unit). ValueError naming `what` and `forms`."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a {what}; use {forms}")
    if isinstance(value, (int, float)):
        return float(value), None
    m = pattern.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a {what}; use {forms}")
    return float(m.group(1)), m.group(2)


def duration_s(value: str | float | int) -> float:
    """Parse a duration to seconds. Bare numbers are seconds. Raises ValueError if negative."""
    number, unit = _number(value, "duration", DURATION_FORMS, _DURATION_RE)
    seconds = number * _DURATION_S[unit or "s"]
    if seconds < 0:
        raise ValueError(f"{value!r} is negative; durations are >= 0")
    return seconds


def duration_ms(value: str | float | int) -> float:
    """Parse a duration to milliseconds (bare numbers are still seconds)."""
    return duration_s(value) * 1e3


def bandwidth_bps(value: str | float | int) -> float:
    """Parse a bandwidth to bits per second. Bare numbers are bits/s."""
    number, unit = _number(value, "bandwidth", RATE_FORMS, _RATE_RE)
    bps = number * _RATE_BPS[(unit or "bit").lower()]
    if bps <= 0:
        raise ValueError(f"{value!r} must be > 0")
    return bps


def fraction(value: str | float | int) -> float:
    """Parse a probability: 0.01 or "1%". Must lie in [0, 1]."""
    number, pct = _number(value, "probability", PCT_FORMS, _PCT_RE)
    p = number / (100.0 if pct else 1.0)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{value!r} is outside [0, 1]")
    return p
