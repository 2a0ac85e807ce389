"""A script of benchmarks/ imported as a module, for the tests of its pure functions (a
reference's interval, an oracle's alerts). The scripts import their neighbour `_common`, so
benchmarks/ is on sys.path while the module loads, and only then.

Tests import it as `bench_kit` (tests/conftest.py puts tests/kits/ on sys.path).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    """benchmarks/NAME.py as a module."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
