"""What the cluster tests share: whether a local cluster can run here, what one leaves on the
machine (namespaces, the bridge), and a load generator's output made without one."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loadgen import digest as ldigest
from loadgen.records import CONNECT

ROOT = Path(__file__).resolve().parents[2]


def needs_root_and_ip():
    """A local cluster needs root (not make setup's to give: a skip) and iproute2's `ip`
    (make setup installs it: a failure)."""
    if os.geteuid() != 0:
        pytest.skip("a local cluster needs root (network namespaces)")
    import setup_kit

    setup_kit.require_tools("ip", package="iproute2")


def cluster_links(pid: int) -> list[str]:
    """Network namespaces and the bridge that perfctl process `pid` made (a local cluster's
    hosts are perfctl-<pid>-<n>, its bridge pcbr<pid>)."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return re.findall(rf"^(perfctl-{pid}-\d+)", ns, re.M) + re.findall(
        rf"^\d+:\s+(pcbr{pid})[:@]", links, re.M
    )


WARMUP_NS = 1_000_000_000
WINDOW_NS = 2_000_000_000


def loadgen_output(
    d: Path,
    n: int,
    start_ns: int,
    seed: int,
    records: bool = True,
    scale_ns: float = 2e6,
    refused_every: int = 0,
):
    """A shard's output directory as `python -m loadgen` leaves it: n requests spread over
    the warm-up and the window of its own clock (start_ns), lognormal latencies; with
    refused_every=k, every k-th request refused (no connection). Returns (the window's latencies in ns, the
    summary)."""
    d.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    intended = start_ns + np.sort(rng.integers(0, WARMUP_NS + WINDOW_NS, n)).astype(np.int64)
    lat = np.rint(rng.lognormal(np.log(scale_ns), 0.8, n)).astype(np.int64) + 1
    cols = {
        "intended_ns": intended,
        "sent_ns": intended + 10,
        "first_byte_ns": np.where(np.arange(n) == 0, 0, intended + 500),
        "done_ns": intended + lat,
        "status": np.full(n, 200, np.int16),
        "error": np.where(
            (np.arange(n) % refused_every == 0) if refused_every else np.zeros(n, bool),
            CONNECT,  # refused
            0,
        ).astype(np.int8),
        "bytes": np.full(n, 10, np.int32),
    }
    dig = ldigest.Digest(5.0)
    dig.begin(start_ns, start_ns + WARMUP_NS, start_ns + WARMUP_NS + WINDOW_NS)
    for lo in range(0, n, 997):  # in chunks, as the sink hands them over
        dig.add({k: v[lo : lo + 997] for k, v in cols.items()})
    dig.write(d)
    if records:
        pd.DataFrame(cols).to_parquet(d / "requests.parquet", index=False, row_group_size=1000)
    inside = (intended >= start_ns + WARMUP_NS) & (intended < start_ns + WARMUP_NS + WINDOW_NS)
    summary = {
        "start_ns": start_ns,
        "measure_start_ns": start_ns + WARMUP_NS,
        "measure_end_ns": start_ns + WARMUP_NS + WINDOW_NS,
        "scheduled_in_window": int(inside.sum()),
        "dropped": 0,
        "requests_recorded": n,
        "gc_pauses": 0,
        "records": "all" if records else "none",
        "records_written": n if records else 0,
        "send_lateness_p99_ms": 0.1 * seed,
        "loop_lag_p99_ms": 0.2,
        "loadgen_cpu_pct": 30.0,
        "gc_pause_max_ms": 0.0,
    }
    (d / "summary.json").write_text(json.dumps(summary))
    return lat[inside], summary
