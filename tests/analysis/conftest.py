"""Shared fixtures for the analysis tests: small real runs (session-scoped), synthetic runs,
and the analysis commands on a local Typer app (cli.py wiring is the lead's)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import quiet_kit
from typer.testing import CliRunner

from orchestrator.cli import app as perfctl_app
from orchestrator.errors import PerfctlError

ROOT = Path(__file__).resolve().parents[2]

# Four closed-load concurrency levels (enough for a USL fit) and two open-load rates.
SMALL = """
name: report-small
servers:
  py: {impl: python, model: async}
workload: {path: /work, params: {spin_us: 300}}
load: {mode: "{mode}", connections: "{connections}", rate: "{rate}", duration: 1500ms,
       warmup: 500ms}
matrix: {mode: [closed, open], connections: [1, 2, 4, 8], rate: [200, 400]}
exclude:
  - {mode: closed, rate: 400}
  - {mode: open, connections: 1}
  - {mode: open, connections: 2}
  - {mode: open, connections: 4}
placement: {server_cpus: [0], loadgen_cpus: [1]}
thresholds:
  - {where: {mode: closed}, error_rate: {le: 0.5}, throughput_rps: {gt: 1}}
  - {p99_ms: {lt: 100000}}
"""

# One closed-load cell, five trials (the fewest with which a Mann-Whitney test across
# trials can reach p < 0.05 / 3): the compare tests run it three times.
COMPARE = """
name: report-compare
servers:
  py: {impl: python, model: async}
workload: {path: /work, params: {spin_us: 200, sleep_us: 0}}
load: {mode: closed, connections: 2, duration: 1s, warmup: 300ms}
repeats: 5
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


def perfctl_run(yaml_text: str, tmp: Path, name: str, *extra: str) -> Path:
    exp = tmp / f"{name}.yaml"
    exp.write_text(yaml_text)
    out = tmp / name
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(exp),
            "--out",
            str(out),
            "--no-plots",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def perfctl_run_valid(yaml_text: str, tmp: Path, name: str, *extra: str) -> Path:
    """perfctl_run, taken again while the host left a trial of it invalid (quiet_kit: invalid
    only because the host was busy, or for the load generator's GC pauses: a CI run beside the
    neighbour had one such trial in each of two runs, and compare rightly called 4 against 4
    trials inconclusive), each attempt in its own directory; after
    quiet_kit.ATTEMPTS the test fails with every trial's readings. Trials perfctl called not
    quiet are kept: the compare tests judge with --include-noisy and a tolerance of 150%, so
    they need valid trials, and beside a busy neighbour most runs have a noisy one (a CI run
    beside 30% of a CPU in bursts read 1-3 of every 5 trials not quiet, all valid)."""
    return quiet_kit.until_quiet(
        lambda attempt: perfctl_run(
            yaml_text, tmp, name if attempt == 0 else f"{name}-{attempt + 1}", *extra
        ),
        lambda run: quiet_kit.run_spoiled(run, need_quiet=False, also=quiet_kit.GENERATOR_PAUSES),
        f"valid trials in a run of {name}",
    )


@pytest.fixture(scope="session")
def small_run(tmp_path_factory) -> Path:
    return perfctl_run(SMALL, tmp_path_factory.mktemp("small"), "run")


@pytest.fixture(scope="session")
def compare_runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    return {
        "base": perfctl_run_valid(COMPARE, tmp, "base"),
        "again": perfctl_run_valid(COMPARE, tmp, "again"),
        "slow": perfctl_run_valid(COMPARE, tmp, "slow", "--set", "workload.params.sleep_us=2000"),
    }


class Result:
    def __init__(self, code: int, output: str) -> None:
        self.code, self.output = code, output


@pytest.fixture
def analysis():
    """Invoke an analysis command as `perfctl` would: PerfctlError -> exit 2."""
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        r = runner.invoke(perfctl_app, [str(a) for a in args])
        if isinstance(r.exception, PerfctlError):
            return Result(2, r.output + str(r.exception))
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception
        return Result(r.exit_code, r.output)

    return invoke


def synthetic_run(
    path: Path, rows: list[dict], thresholds: list | None = None, requests: bool = False
) -> Path:
    """A run directory with run.json and trials.csv (enough for check); with requests, each
    trial also gets a summary.json and a requests.parquet of 20 requests whose latency is the
    row's latency_p50_ms (enough for compare)."""
    path.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    df.to_csv(path / "trials.csv", index=False)
    for r in rows if requests else []:
        tdir = path / "cells" / r["cell_id"] / f"trial-{r['trial']}"
        tdir.mkdir(parents=True, exist_ok=True)
        start = 10**9
        (tdir / "summary.json").write_text(
            json.dumps({"start_ns": 0, "measure_start_ns": start, "measure_end_ns": 3 * start})
        )
        t = np.arange(20, dtype=np.int64) * 10**8 + start
        pd.DataFrame(
            {
                "intended_ns": t,
                "sent_ns": t,
                "done_ns": t + int(r.get("latency_p50_ms", 1.0) * 1e6),
                "status": np.full(20, 200, dtype=np.int16),
                "error": np.zeros(20, dtype=np.int8),
            }
        ).to_parquet(tdir / "requests.parquet")
    axes = ["server", "rate"]
    cells = [
        {"cell_id": cid, "values": {a: g[a].iloc[0] for a in axes}}
        for cid, g in df.groupby("cell_id", sort=False)
    ]
    info = {
        "experiment": "synthetic",
        "source": str(path / "exp.yaml"),
        "axes": axes,
        "cells": json.loads(pd.Series(cells).to_json(orient="values")),
        "document": {"name": "synthetic", "thresholds": thresholds or []},
    }
    (path / "run.json").write_text(json.dumps(info))
    return path
