"""The USL's peak is never below one client: with contention sigma >= 1 (or a coherency cost so
large that the interior peak would fall below one) throughput falls from the first client on,
and the fit puts the peak at N = 1 with the single-client throughput."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models import usl


@pytest.mark.parametrize("sigma,kappa", [(1.0, 0.01), (1.5, 0.02), (2.0, 0.0), (0.9, 1.0)])
def test_usl_peak_clamped_to_one(sigma, kappa):
    n = np.array([1, 2, 4, 8, 16])
    x = usl.predict(n, sigma, kappa, 50.0)
    f = usl.fit(n, x)
    assert f.peak_concurrency >= 1.0 and f.peak_throughput > 0
    assert f.peak_concurrency == pytest.approx(1.0)
    assert f.peak_throughput == pytest.approx(f.lam) and f.lam == pytest.approx(50.0, rel=1e-4)
    assert f.peak_throughput >= float(np.max(f.predict(n))) - 1e-9


def test_usl_peak_private_helper_edge_cases():
    assert usl._peak(1.0, 0.01, 7.0) == (1.0, pytest.approx(7.0))
    assert usl._peak(3.0, 0.0, 7.0) == (1.0, 7.0)
    n, x = usl._peak(0.05, 0.0004, 120.0)  # the interior root is untouched
    assert n == pytest.approx(math.sqrt(0.95 / 0.0004)) and x == pytest.approx(
        usl.predict(n, 0.05, 0.0004, 120.0)
    )
    assert usl._peak(0.1, 0.0, 10.0) == (math.inf, pytest.approx(100.0))
