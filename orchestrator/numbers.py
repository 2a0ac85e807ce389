"""Numbers and lengths as text: the one formatter behind every table perfctl prints or writes.

Every table treats a missing value the same way. None, NaN and text that is not a number
print as "-", and an infinity prints as "inf" ("∞" in the HTML report). `fmt(v, ".3f")`
follows a format spec. `fmt(v)` gives the compact form of the run summary: at most 5
characters, which is why its columns never need cutting. This module imports nothing, so
every layer (cli, api, analysis) can use it.
"""

from __future__ import annotations

import math

COMPACT = "compact"  # fmt's spec for the summary's 5-character form


def fmt(v, spec: str = COMPACT, inf: str = "inf") -> str:
    """v as text with `spec` (a format spec such as ".3f", or COMPACT): "-" for None, NaN and
    anything float() refuses; `inf` for either infinity."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    if math.isnan(f):
        return "-"
    if math.isinf(f):
        return inf
    return _compact(f) if spec == COMPACT else format(f, spec)


def _compact(f: float) -> str:
    """A finite number in at most 5 characters: 0, 0.412, 3.14, 42.1, 637, 1.02k, 10.2k,
    102k, 1.02M."""
    a = abs(f)
    if f == int(f) and a < 1000:
        return str(int(f))
    if a < 0.001:
        return f"{f:.0e}"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= scale * 0.9995 and a >= 1000:
            x = f / scale
            return f"{x:.3g}{suffix}" if abs(x) < 100 else f"{x:.0f}{suffix}"
    if a >= 100:
        return f"{f:.0f}"
    if a >= 10:
        return f"{f:.1f}"
    if a >= 1:
        return f"{f:.2f}"
    return f"{f:.3f}"


def pct(v) -> str:
    """A relative change as a signed whole percentage (0.123 -> "+12%"); "-" when missing."""
    text = fmt(100 * v if isinstance(v, (int, float)) else math.nan, "+.0f")
    return text + ("%" if isinstance(v, (int, float)) and math.isfinite(v) else "")


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
