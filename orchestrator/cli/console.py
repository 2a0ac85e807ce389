"""The consoles every command prints to, and number formatting for tables."""

from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager

from rich.console import Console

console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)


def fmt(v, spec: str) -> str:
    """v formatted with spec; "-" for missing or NaN, "inf" for infinities."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    if math.isnan(f):
        return "-"
    return format(f, spec) if math.isfinite(f) else "inf"


def pct(v) -> str:
    """A relative change as a signed whole percentage (0.123 -> "+12%")."""
    return fmt(100 * v if isinstance(v, (int, float)) else math.nan, "+.0f") + (
        "%" if isinstance(v, (int, float)) and math.isfinite(v) else ""
    )


def fmt_duration(seconds: float) -> str:
    """Whole seconds as 42s, 1m05s or 75h02m."""
    m, s = divmod(int(round(seconds)), 60)
    if m >= 60:
        return f"{m // 60}h{m % 60:02d}m"
    return f"{m}m{s:02d}s" if m else f"{s}s"


def fmt_span(seconds: float) -> str:
    """A configured length as h/m/s: 250ms, 1.5s, 20s, 2m, 2m30s, 1h, 1h05m."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:.3g}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    if h:
        return f"{h}h{m:02d}m" if m else f"{h}h"
    return f"{m}m{s:02d}s" if s else f"{m}m"


@contextmanager
def step(what: str):
    """A slow step the user should see: a spinner on a terminal, else a line before and one
    after with the time it took."""
    t0 = time.monotonic()
    if console.is_terminal:
        with console.status(f"{what} ..."):
            yield
        console.print(f"{what}: done in {time.monotonic() - t0:.1f} s", highlight=False)
    else:
        console.print(f"{what} ...", highlight=False)
        yield
        console.print(f"{what}: done in {time.monotonic() - t0:.1f} s", highlight=False)
