"""`perfctl.history()`: the performance history as a DataFrame, for notebooks."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..history import trend
from ..history.store import Store, locate


def history(
    experiment: str | None = None,
    *,
    store: str | Path | None = None,
    capacities: bool = False,
) -> pd.DataFrame:
    """Every trial in the history store (of one experiment when named), one row each, oldest
    run first: run_id, experiment, started (UTC), commit_sha, host_fingerprint, cell_id,
    cell_label, trial, throughput_rps, latency_p50_ms, latency_p99_ms, error_rate, valid,
    quiet. capacities=True: the searched capacities instead (capacity, low, high, unit,
    found). store: a file or postgresql:// URL (default: $PERFCTL_HISTORY_URL, else
    results/history.sqlite). PerfctlError when the store is missing, locked, corrupt, from a
    newer perfctl or unreachable."""
    with Store(locate(store), create=False) as st:
        if capacities:
            df = pd.DataFrame(st.capacities(experiment))
            if not df.empty:
                df["started"] = pd.to_datetime(df["started"], utc=True, errors="coerce")
            return df
        return trend.trials_frame(st, experiment)
