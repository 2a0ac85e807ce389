"""endpoints.csv: one row per endpoint (request of the workload's mix) of one trial. This
module owns its columns; run/endpoints.py computes the rows, results.load() gathers them.

A trial without a mix has one row, its one request (named by its path), equal to the trial's
own figures. With a mix, each row holds the figures of that request's rows in the trial's
measured window, from the load generator's digest (loadgen/digest.py: counts exact,
percentiles from an HdrHistogram, at most 0.1% above the exact order statistic); the rows'
`requests` and `errors` add up to the trial's.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

ENDPOINTS_FILE = "endpoints.csv"
ENDPOINT_COLUMNS = [
    "endpoint",  # the request's name (workload.requests[].name; the path without a mix)
    "request",  # its index in the mix: the `request` column of requests.parquet
    "share",  # its fraction of the trial's requests
    "requests",
    "completed",
    "errors",
    "error_rate",
    "throughput_rps",
    "latency_mean_ms",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_max_ms",
    "valid",  # the trial is valid and this endpoint's own figures hold (see `validity`)
    "validity",  # why not, in words ("" when valid)
]


def write_endpoints(tdir: Path, rows: list[dict]) -> None:
    """The trial's endpoints.csv, written whole and renamed."""
    df = pd.DataFrame(rows, columns=ENDPOINT_COLUMNS)
    tmp = tdir / (ENDPOINTS_FILE + ".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(tdir / ENDPOINTS_FILE)


def read_endpoints(tdir: Path) -> pd.DataFrame | None:
    """A trial's endpoints.csv (None when the trial has none: written before they existed)."""
    f = Path(tdir) / ENDPOINTS_FILE
    if not f.is_file():
        return None
    df = pd.read_csv(f, dtype={"endpoint": str, "validity": str})
    df["validity"] = df["validity"].fillna("")
    return df
