"""Little's law and the utilisation law checks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from models import laws


def test_littles_law_ok_and_not_ok():
    good = laws.littles_law(200.0, 0.05, 10.4)
    assert good.predicted == pytest.approx(10.0) and good.ok
    assert good.relative_error == pytest.approx(0.04)
    bad = laws.littles_law(200.0, 0.05, 12.0)
    assert not bad.ok and bad.relative_error == pytest.approx(0.2)
    assert laws.littles_law(200.0, 0.05, 12.0, tolerance=0.25).ok
    assert laws.littles_law(0.0, 0.05, 0.0).ok
    assert not laws.littles_law(0.0, 0.05, 1.0).ok


def test_utilization_law():
    r = laws.utilization_law(150.0, 0.01, 0.74, servers=2)
    assert r.predicted == pytest.approx(0.75) and r.ok
    assert not laws.utilization_law(150.0, 0.01, 0.5, servers=2).ok
    assert laws.utilization_law(50.0, 0.01, 0.5).ok


@pytest.mark.parametrize(
    "call",
    [
        lambda: laws.littles_law(-1, 1, 1),
        lambda: laws.littles_law(1, float("nan"), 1),
        lambda: laws.utilization_law(1, 1, 1, servers=0),
        lambda: laws.utilization_law("x", 1, 1),
    ],
)
def test_bad_inputs(call):
    with pytest.raises(ValueError):
        call()


def test_frame_helper_closed_loop():
    df = pd.DataFrame(
        {
            "throughput_rps": [100.0, 100.0, np.nan],
            "latency_mean_ms": [50.0, 50.0, 1.0],
            "connections": [10, 20, 5],
            "think_time_s": [0.05, 0.0, 0.0],
        }
    )
    out = laws.check_littles_law_frame(df)
    assert out["little_ok"].tolist() == [True, False, False]
    assert out["little_predicted"].iloc[0] == pytest.approx(10.0)
    assert math.isnan(out["little_rel_error"].iloc[2])


def test_in_flight_from_requests():
    # two overlapping requests of 1 s each in a 1.5 s window -> 4/3 in flight on average
    req = pd.DataFrame(
        {
            "cell_id": ["a", "a"],
            "trial": [0, 0],
            "sent_ns": [0, 500_000_000],
            "done_ns": [1_000_000_000, 1_500_000_000],
            "error": [0, 0],
        }
    )
    out = laws.in_flight_from_requests(req)
    assert out["in_flight"].iloc[0] == pytest.approx(2.0 / 1.5)
    chk = laws.littles_law(
        out["throughput_rps"].iloc[0], out["mean_time_s"].iloc[0], out["in_flight"].iloc[0]
    )
    assert chk.ok and chk.relative_error == pytest.approx(0.0, abs=1e-12)
