"""Shared fixtures for the analysis tests: small real runs (session-scoped), synthetic runs,
and the analysis commands on a local Typer app (cli.py wiring is the lead's)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app as perfctl_app
from orchestrator.errors import PerfctlError
from orchestrator.measure import noise

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


# a trial invalid for one of these reasons only was spoiled by the host, not by perfctl
HOST_BUSY_REASONS = re.compile(r"host busy|fell behind its schedule")
# runs of COMPARE in all (the first and the re-runs) before a test marked needs_quiet gives up
# (CI once read a steal of 25-40% through three runs in a row, about 40 s)
QUIET_ATTEMPTS = 5
NOISE_READINGS = [
    "loop_lag_p99_ms",
    "send_lateness_p99_ms",
    "loadgen_cpu_pct",
    "noise_steal_pct",
    "noise_foreign_cpu_pct",
    "noise_loadgen_runqueue_wait_ms_per_s",
    "noise_server_runqueue_wait_ms_per_s",
    "noise_loadgen_cpu_others_pct",
]


def _trials(run_dir: Path) -> pd.DataFrame:
    reasons = {"invalid_reasons": str, "noise_reasons": str}
    return pd.read_csv(run_dir / "trials.csv", dtype=reasons).fillna(dict.fromkeys(reasons, ""))


def host_busy_trials(run_dir: Path) -> pd.DataFrame:
    """The trials of run_dir that are invalid only because the host was busy (every one of
    their reasons a HOST_BUSY_REASONS one)."""
    trials = _trials(run_dir)
    reasons = trials["invalid_reasons"]
    only_host = reasons.map(
        lambda r: bool(r) and all(HOST_BUSY_REASONS.search(x) for x in r.split("; "))
    )
    return trials[~trials["valid"].astype(bool) & only_host]


def noise_readings(run_dir: Path) -> str:
    """One line per trial of run_dir: valid and why not, quiet and why not, and the readings
    of the load generator's own checks and of the noise probe."""
    lines = [f"{run_dir.name}:"]
    for _, t in _trials(run_dir).iterrows():
        readings = ", ".join(
            f"{c} {t[c]:.3g}" for c in NOISE_READINGS if c in t.index and pd.notna(t[c])
        )
        lines.append(
            f"  trial {t['trial']}: valid={bool(t['valid'])} ({t['invalid_reasons']}); "
            f"quiet={t.get('quiet')} ({t.get('noise_reasons', '')}); {readings}"
        )
    return "\n".join(lines)


def perfctl_run_quiet(yaml_text: str, tmp: Path, name: str, *extra: str) -> Path:
    """perfctl_run, run again (QUIET_ATTEMPTS runs in all, each in its own directory) while
    some trial of it is invalid only because the host was busy, or not quiet (perfctl's own
    noise verdict: steal, foreign CPU). Returns the first run with none such, or the last
    one: a test marked needs_quiet then fails on it with the noise readings
    (fail_when_host_busy), never skips."""
    for attempt in range(1, QUIET_ATTEMPTS + 1):
        out = perfctl_run(yaml_text, tmp, name if attempt == 1 else f"{name}-{attempt}", *extra)
        if host_busy_trials(out).empty and _trials(out)["quiet"].astype(bool).all():
            break
    return out


# the hypervisor's share of the CPU (perfctl's noise probe, noise_steal_pct) at which a
# spoiled trial is the host's beyond doubt: perfctl's own "not quiet" bound
STEAL_PCT = noise.MAX_STEAL_PCT


def fail_when_host_busy(*run_dirs: Path) -> None:
    """End the test, with every trial's noise readings, when one of run_dirs still has trials
    invalid only because the host was busy (after QUIET_ATTEMPTS runs): a skip when each such
    trial ran under a CPU steal of STEAL_PCT or more (the hypervisor took the CPU: no run on
    this host can give the test its premise; CI read 8-29% through 3 minutes of runs), a
    failure otherwise (something on this machine, or perfctl itself, spoiled them)."""
    busy = {d: host_busy_trials(d) for d in run_dirs}
    busy = {d: t for d, t in busy.items() if not t.empty}
    if not busy:
        return
    message = (
        f"the host was too busy for valid trials in {QUIET_ATTEMPTS} runs of "
        f"{', '.join(d.name.rsplit('-', 1)[0] for d in busy)}; the last runs read:\n"
        + "\n".join(noise_readings(d) for d in run_dirs)
    )
    stolen = all(
        "noise_steal_pct" in t.columns and (t["noise_steal_pct"].astype(float) >= STEAL_PCT).all()
        for t in busy.values()
    )
    if stolen:
        pytest.skip(f"CPU steal of {STEAL_PCT:g}% or more: {message}")
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def small_run(tmp_path_factory) -> Path:
    return perfctl_run(SMALL, tmp_path_factory.mktemp("small"), "run")


@pytest.fixture(scope="session")
def compare_runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    return {
        "base": perfctl_run_quiet(COMPARE, tmp, "base"),
        "again": perfctl_run_quiet(COMPARE, tmp, "again"),
        "slow": perfctl_run_quiet(COMPARE, tmp, "slow", "--set", "workload.params.sleep_us=2000"),
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
