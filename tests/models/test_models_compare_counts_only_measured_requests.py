"""compare() and the service estimate count only the measured requests: rows of the warm-up
are left out when the requests are marked (a `measured` column, a mask, the trial's measure
window), and rows that never finished (status 0, done_ns 0, no error class) never enter the
latency statistics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models import comparison, parameters, predict
from models.parameters import ServiceEstimate

MS = 1_000_000  # ns per ms


def _warm_run():
    """One open M/M/1-ish cell whose first second (warm-up) is far slower than the rest."""
    rng = np.random.default_rng(7)
    n = 4000
    intended = np.sort(rng.uniform(0, 5e9, n)).astype(np.int64)
    warm = intended < 1e9
    svc = rng.exponential(1.0, n)  # ms
    queue = np.where(warm, 20.0, rng.exponential(1.0, n))
    lat_ms = svc + queue + 0.1
    lat = (lat_ms * MS).astype(np.int64)
    reqs = pd.DataFrame(
        {
            "cell_id": "c1",
            "trial": 1,
            "intended_ns": intended,
            "sent_ns": intended,
            "done_ns": intended + lat,
            "latency_ns": lat,
            "service_ns": lat,
            "status": 200,
            "error": 0,
            "svc_ms": np.where(warm, 5.0, svc),
            "queue_ms": queue,
        }
    )
    trials = pd.DataFrame(
        [
            dict(
                cell_id="c1",
                trial=1,
                server="c",
                load_mode="open",
                target_rate=500.0,
                achieved_rate=500.0,
                throughput_rps=500.0,
                latency_mean_ms=np.nan,
                latency_p99_ms=np.nan,
                valid=True,
                connections=1,
                server_threads=1,
                server_cores=1,
                server_backlog=128,
                work_spin_us=1000.0,
                work_sleep_us=0.0,
            )
        ]
    )
    steady = lat_ms[~warm]
    return (
        trials,
        reqs,
        warm,
        float(steady.mean()),
        float(np.percentile(steady, 99)),
        float(svc[~warm].mean()),
    )


def test_compare_drops_warmup_when_marked():
    trials, reqs, warm, mean, p99, s_mean = _warm_run()
    raw = comparison.compare(trials, reqs).iloc[0]
    assert raw["measured_mean_ms"] > mean * 1.5  # warm-up included: far off
    expected = dict(measured_mean_ms=mean, measured_p99_ms=p99, service_mean_ms=s_mean)
    variants = {
        "column": (trials, reqs.assign(measured=~warm), None),
        "mask": (trials, reqs, ~warm),
        "series mask": (trials, reqs, pd.Series(~warm, index=reqs.index)),
        "trial window": (
            trials.assign(measure_start_ns=int(1e9), measure_end_ns=int(6e9)),
            reqs,
            None,
        ),
    }
    for name, (t, r, m) in variants.items():
        row = comparison.compare(t, r, measured=m).iloc[0]
        for k, v in expected.items():
            assert row[k] == pytest.approx(v, rel=1e-6), (name, k)
    # estimate_service honours the column on its own too
    e = parameters.estimate_service(reqs.assign(measured=~warm))
    assert e.mean_s == pytest.approx(s_mean / 1e3, rel=1e-9)
    with pytest.raises(ValueError, match="mask"):
        comparison.compare(trials, reqs, measured=np.ones(3, dtype=bool))


def test_predict_cell_unaffected_by_measured_column():
    svc = ServiceEstimate(mean_s=0.001, scv=1.0, source="server_timing")
    p = predict.predict_cell(
        dict(
            load_mode="open",
            target_rate=500.0,
            server_threads=1,
            server_cores=1,
            work_spin_us=1000,
            work_sleep_us=0,
            server_backlog=float("nan"),
        ),
        svc,
    )
    assert p["model"] == "M/M/1" and p["mean_ms"] == pytest.approx(2.0)


def test_compare_ignores_unfinished_rows_without_error_class():
    """Rows with error 0 but status 0 and done_ns 0 (arrivals never sent or never answered,
    as a starved load generator leaves them) must not enter the latency statistics."""
    trials, reqs, warm, mean, p99, s_mean = _warm_run()
    reqs = reqs.assign(measured=~warm)
    ghost = reqs.iloc[:50].assign(
        sent_ns=0,
        first_byte_ns=0,
        done_ns=0,
        status=0,
        error=0,
        svc_ms=np.nan,
        queue_ms=np.nan,
        measured=True,
    )
    ghost["latency_ns"] = ghost["done_ns"] - ghost["intended_ns"]
    ghost["service_ns"] = 0
    row = comparison.compare(trials, pd.concat([reqs, ghost], ignore_index=True)).iloc[0]
    assert row["measured_mean_ms"] == pytest.approx(mean, rel=1e-6)
    assert row["measured_p99_ms"] == pytest.approx(p99, rel=1e-6)
