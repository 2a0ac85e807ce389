"""A reading as a float, NaN when there is none: the one reader behind every row, summary and
capacity.json value that may be missing (None), blank or text, so each module does not carry
its own copy. It imports nothing, so the layers that read such values may import it even
where they may import nothing else of loadgen/ (models/, orchestrator's measure and history:
tests/test_layers.py).
"""

from __future__ import annotations

import math


def float_or_nan(v) -> float:
    """v as a float: an int, a float (NaN and infinities as they are), a numpy number, a bool
    (0.0 or 1.0) or text float() reads ("3.5", " 2 ", "inf"); NaN for None and for anything
    else float() refuses (blank or other text, a list, an object)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan
