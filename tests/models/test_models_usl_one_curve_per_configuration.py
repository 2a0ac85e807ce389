"""The USL is fitted once per configuration: on a trials table shaped like a real trials.csv
(per-trial readings that differ in every trial, config-derived columns) the trials of one
server group into one curve whatever their readings, and a configuration axis (one unknown
to perfctl too) still splits the groups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models import comparison, usl

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
