"""One formatter for every number perfctl prints or writes (orchestrator/numbers.py): the
summary's compact form, a format spec, and the same "-" and "inf" for what is not a finite
number, wherever the number is shown."""

import math

import numpy as np
import pytest

from orchestrator.numbers import fmt, pct


@pytest.mark.parametrize("missing", [None, math.nan, np.nan, "n/a", "", object()])
def test_a_missing_value_is_a_dash_in_every_form(missing):
    assert fmt(missing) == fmt(missing, ".3f") == fmt(missing, ",.0f") == "-"


def test_an_infinity_is_inf_or_what_the_caller_asks_for():
    assert fmt(math.inf) == fmt(-math.inf, ".3f") == "inf"
    assert fmt(np.inf, ".4g", inf="∞") == "∞"


def test_a_spec_formats_as_format_does_and_numbers_may_come_as_text():
    assert fmt(3.14159, ".3f") == "3.142"
    assert fmt(12345.6, ",.0f") == "12,346"
    assert fmt("0.5", ".2f") == "0.50"
    assert fmt(np.float32(2.5), ".1f") == "2.5"


def test_a_relative_change_is_a_signed_whole_percentage():
    assert pct(0.123) == "+12%" and pct(-0.05) == "-5%"
    assert pct(math.nan) == "-" and pct(None) == "-" and pct(math.inf) == "inf"


def test_the_html_reports_numbers_are_the_same_with_infinity_as_a_sign():
    from orchestrator.analysis.report import _num

    assert _num(1234.5678, ".1f") == fmt(1234.5678, ".1f") == "1234.6"
    assert _num(math.nan, ".1f") == "-" and _num(math.inf, ".1f") == "∞"
    assert _num("<b>", ".1f") == "&lt;b&gt;"  # text stays text, escaped
