"""USL / Amdahl fits: recovery of known parameters, intervals, edge cases, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models import usl

N = np.array([1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128])


def test_exact_data_recovers_parameters():
    x = usl.predict(N, 0.05, 0.0004, 120.0)
    f = usl.fit(N, x)
    assert f.sigma == pytest.approx(0.05, rel=1e-6)
    assert f.kappa == pytest.approx(0.0004, rel=1e-6)
    assert f.lam == pytest.approx(120.0, rel=1e-6)
    assert f.r_squared == pytest.approx(1.0)
    assert f.peak_concurrency == pytest.approx(math.sqrt(0.95 / 0.0004), rel=1e-6)
    assert f.peak_throughput == pytest.approx(usl.predict(f.peak_concurrency, 0.05, 0.0004, 120.0))
    np.testing.assert_allclose(f.predict(N), x, rtol=1e-6)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noisy_data_recovers_parameters_within_confidence_intervals(seed):
    rng = np.random.default_rng(seed)
    true = dict(sigma=0.03, kappa=0.0002, lam=250.0)
    x = usl.predict(N, **true) * (1 + 0.02 * rng.standard_normal(N.size))
    f = usl.fit(N, x)
    assert f.sigma == pytest.approx(true["sigma"], rel=0.3)
    assert f.kappa == pytest.approx(true["kappa"], rel=0.3)
    assert f.lam == pytest.approx(true["lam"], rel=0.05)
    for name in ("sigma", "kappa", "lam"):
        lo, hi = getattr(f, f"{name}_ci")
        assert lo <= getattr(f, name) <= hi
        assert lo <= true[name] <= hi, name
    assert f.dof == N.size - 3 and f.r_squared > 0.98


def test_amdahl_fit_and_peak_at_infinity():
    x = usl.predict(N, 0.1, 0.0, 10.0)
    a = usl.amdahl_fit(N, x)
    assert a.kappa == 0.0 and a.kappa_ci == (0.0, 0.0) and a.model == "amdahl"
    assert a.sigma == pytest.approx(0.1, rel=1e-6) and a.lam == pytest.approx(10.0, rel=1e-6)
    assert a.peak_concurrency == math.inf and a.peak_throughput == pytest.approx(100.0)
    f = usl.fit(N, x)  # the full fit finds kappa ~ 0 at the bound
    assert f.kappa == pytest.approx(0.0, abs=1e-9) and f.sigma == pytest.approx(0.1, rel=1e-5)


def test_bounds_respected_for_superlinear_data():
    x = 10.0 * N**1.05  # super-linear: best unconstrained sigma would be negative
    f = usl.fit(N, x)
    assert f.sigma >= 0.0 and f.kappa >= 0.0 and f.lam > 0.0


def test_module_predict_scalar_and_array():
    assert usl.predict(1, 0.3, 0.1, 7.0) == pytest.approx(7.0)
    assert isinstance(usl.predict(4, 0.3, 0.1, 7.0), float)
    assert usl.predict([1, 2], 0, 0, 3.0).tolist() == [3.0, 6.0]


def test_bad_inputs():
    with pytest.raises(ValueError, match="same length"):
        usl.fit([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 3"):
        usl.fit([1, 2], [1, 2])
    with pytest.raises(ValueError, match="> 0"):
        usl.fit([0, 1, 2, 3], [0, 1, 2, 3])
    with pytest.raises(ValueError, match="zero"):
        usl.fit([1, 2, 3], [0, 0, 0])
    f = usl.fit([1, 2, 4], [1.0, 1.9, 3.5])  # no residual dof: no intervals
    assert math.isnan(f.sigma_ci[0])
