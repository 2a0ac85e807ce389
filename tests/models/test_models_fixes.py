"""Regression tests: USL grouping on realistic trial tables, warm-up filtering in compare(),
and the USL peak when contention sigma >= 1."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from models import comparison, estimate, predict, usl
from models.estimate import ServiceEstimate

MS = 1_000_000  # ns per ms
LEVELS = (1, 2, 4, 8, 16, 32)


def _noisy_closed_trials(repeats: int, seed: int = 3) -> pd.DataFrame:
    """Closed trials shaped like a real trials.csv: axes, config-derived columns, and the
    per-trial readings perfctl writes (all different in every trial). Two servers, each with
    six concurrency levels on its own USL curve."""
    rng = np.random.default_rng(seed)
    curves = {"c-pool": (0.05, 0.001, 240.0), "py": (0.2, 0.0, 90.0)}
    rows = []
    for server, (s, k, lam) in curves.items():
        for n in LEVELS:
            cell = f"{server}-{n}"
            for trial in range(1, repeats + 1):
                x = usl.predict(n, s, k, lam)
                p99 = n / x * 1e3 * rng.uniform(2, 3)
                rows.append(
                    dict(
                        cell_id=cell,
                        trial=trial,
                        server=server,
                        mode="closed",
                        server_impl="c" if server == "c-pool" else "python",
                        server_model="pool" if server == "c-pool" else "async",
                        server_threads=4,
                        server_backlog=128,
                        server_cores=1,
                        load_mode="closed",
                        connections=n,
                        think_time_s=0.0,
                        duration_s=2.0,
                        work_spin_us=200.0,
                        work_sleep_us=0.0,
                        startup_s=rng.uniform(0.1, 0.3),
                        requests=int(x * 2),
                        completed=int(x * 2),
                        errors=0,
                        error_rate=0.0,
                        dropped=0,
                        success_ratio=1.0,
                        throughput_rps=x,
                        target_rate=np.nan,
                        achieved_rate=x,
                        latency_mean_ms=n / x * 1e3,
                        latency_min_ms=rng.uniform(0.2, 0.3),
                        latency_max_ms=rng.uniform(10, 70),
                        service_mean_ms=rng.uniform(0.9, 2.8),
                        service_p99_ms=rng.uniform(5, 36),
                        errors_refused=0,
                        errors_reset=0,
                        errors_timeout=int(rng.integers(0, 2)),
                        errors_parse=0,
                        errors_dropped=0,
                        errors_unfinished=0,
                        errors_http=0,
                        latency_p50_ms=rng.uniform(0.5, 1.2),
                        latency_p90_ms=rng.uniform(2, 4),
                        latency_p99_ms=p99,
                        latency_p999_ms=p99 * 1.5,
                        latency_p99_ci_low_ms=p99 * 0.8,
                        latency_p99_ci_high_ms=p99 * 1.3,
                        rtt_p50_ms=rng.uniform(0.02, 0.05),
                        rtt_p99_ms=rng.uniform(0.1, 0.3),
                        loop_lag_p99_ms=rng.uniform(1, 5),
                        loadgen_cpu_pct=rng.uniform(5, 20),
                        gc_pause_max_ms=rng.uniform(0.1, 0.3),
                        send_lateness_p99_ms=0.0,
                        send_lateness_max_ms=0.0,
                        server_cpu_pct=rng.uniform(10, 50),
                        server_rss_mb=rng.uniform(28.0, 28.3),
                        server_threads_max=int(rng.integers(2, 6)),
                        throughput_kib_s=x * rng.uniform(0.1, 0.11),
                        valid=True,
                        invalid_reasons=rng.choice(
                            ["", "load-generator event-loop lag p99 5.9 ms"]
                        ),
                    )
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("repeats", [1, 3])
def test_usl_groups_ignore_per_trial_columns(repeats):
    trials = _noisy_closed_trials(repeats)
    groups = comparison._usl_groups(trials)
    assert len(groups) == 2  # one per server, not one per trial
    for g in groups:
        assert g["server"].nunique() == 1
        assert sorted(g["connections"].unique()) == list(LEVELS)
        assert len(g) == len(LEVELS) * repeats
    table = comparison.compare(trials, None).set_index("cell_id")
    assert table.loc["c-pool-8", "usl_sigma"] == pytest.approx(0.05, rel=1e-3)
    assert table.loc["c-pool-8", "usl_kappa"] == pytest.approx(0.001, rel=1e-2)
    assert table.loc["py-8", "usl_sigma"] == pytest.approx(0.2, rel=1e-3)
    assert table.loc["py-8", "err_usl_mean"] == pytest.approx(0.0, abs=1e-3)


def test_usl_groups_still_split_on_config_axes():
    """A configuration axis (here `delay`, unknown to perfctl, and server_threads) still splits
    the groups, also when every cell has a single trial."""
    base = _noisy_closed_trials(1)
    base = base[base["server"] == "c-pool"]
    parts = []
    for delay in ("0ms", "5ms"):
        for threads in (2, 4):
            parts.append(
                base.assign(
                    delay=delay,
                    server_threads=threads,
                    cell_id=base["cell_id"] + f"-{delay}-{threads}",
                )
            )
    trials = pd.concat(parts, ignore_index=True)
    groups = comparison._usl_groups(trials)
    assert len(groups) == 4
    assert all(len(g) == len(LEVELS) and g["delay"].nunique() == 1 for g in groups)
    # an axis that only renames the concurrency (1:1 with connections) does not split
    aliased = base.assign(users=base["connections"].map(lambda n: f"u{n}"))
    assert len(comparison._usl_groups(aliased)) == 1


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
    e = estimate.estimate_service(reqs.assign(measured=~warm))
    assert e.mean_s == pytest.approx(s_mean / 1e3, rel=1e-9)
    with pytest.raises(ValueError, match="mask"):
        comparison.compare(trials, reqs, measured=np.ones(3, dtype=bool))


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
