"""float_or_nan (loadgen/floats.py): the one reading of a value that may be missing as a float
or NaN, used by loadgen/, models/ and the orchestrator's layers alike."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest

import loadgen.floats
from loadgen.floats import float_or_nan


@pytest.mark.parametrize(
    "v, expected",
    [
        (3, 3.0),
        (2.5, 2.5),
        (-0.0, 0.0),
        (True, 1.0),
        (False, 0.0),
        (np.int64(7), 7.0),
        (np.float32(0.5), 0.5),
        ("3.5", 3.5),
        (" 2 ", 2.0),
        ("1e3", 1000.0),
        (1_700_000_000_123_456_789, 1.700000000123456789e18),
        (math.inf, math.inf),
        ("-inf", -math.inf),
    ],
)
def test_a_number_or_numeric_text_reads_as_its_float(v, expected):
    x = float_or_nan(v)
    assert type(x) is float
    assert x == expected


@pytest.mark.parametrize("v", [None, math.nan, np.nan, "nan", "", "n/a", "-", [], {}, object()])
def test_what_is_missing_or_not_a_number_reads_as_nan(v):
    x = float_or_nan(v)
    assert type(x) is float
    assert math.isnan(x)


def test_a_row_entry_that_is_absent_reads_as_nan():
    row = {"throughput_rps": 812.0, "error_rate": None, "valid": "True"}
    assert float_or_nan(row.get("throughput_rps")) == 812.0
    assert math.isnan(float_or_nan(row.get("error_rate")))
    assert math.isnan(float_or_nan(row.get("not_there")))
    assert math.isnan(float_or_nan(row.get("valid")))


def test_it_imports_nothing_of_the_project():
    tree = ast.parse(Path(loadgen.floats.__file__).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names] + [
        n.module or "." for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
    ]
    assert set(imported) <= {"__future__", "math"}, imported
