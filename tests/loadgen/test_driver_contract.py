"""The driver contract (loadgen/DRIVER.md), end to end: every driver runs real trials through
`perfctl run` and its output must honour the contract. Run against the HTTP generator, the
bundled Java RMI driver (against the RMI server) and toy drivers, one honest and several
broken on purpose.

What a driver must show: the open schedule honoured exactly (intended send times are the
schedule perfctl handed over), the columns, errors classified (a server too slow for the
timeout gives timeouts, an unknown operation 404 answers), the self-checks present, and that
bad output (or a non-zero exit) makes the trial invalid with a clear reason, never a crash.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import setup_kit

from loadgen import contract
from loadgen.records import COLUMNS, TIMEOUT, UNFINISHED
from orchestrator.results.claim import trial_dir

ROOT = Path(__file__).resolve().parents[2]
TOY = Path(__file__).resolve().parent / "toy_driver.py"
# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

# closed, open and burst, then two cells whose requests fail in known ways
CONTRACT = """
name: contract-{driver}
servers:
  s: {server}
workload: {{path: "{{path}}", params: {{sleep_us: "{{sleep_us}}"}}}}
load: {{driver: {driver}, mode: "{{mode}}", rate: 200, connections: 4, duration: 1500ms,
        warmup: 300ms, timeout: "{{timeout}}", bursts: 2, burst_interval: 500ms}}
matrix: {{mode: [closed, open, burst], path: [/work], sleep_us: [0], timeout: [2s]}}
include:
  - {{server: s, mode: closed, path: /work, sleep_us: 300000, timeout: 100ms}}
  - {{server: s, mode: closed, path: /nope, sleep_us: 0, timeout: 2s}}
repeats: 1
order: sequential
"""
SERVERS = {"http": "{impl: python, model: async}", "rmi": "{impl: java, model: rmi, threads: 8}"}

TOYS = f"""
name: contract-toys
servers:
  s: {{impl: python, model: async}}
workload: {{path: /work}}
load: {{driver: {{cmd: "{sys.executable} {TOY} {{how}} {{spec}} {{out}}"}}, mode: closed,
        duration: 1s, warmup: 200ms, timeout: 2s}}
matrix: {{how: [good, exit, no-column, malformed, no-summary, short, no-self-checks]}}
repeats: 1
order: sequential
"""


def perfctl_run(tmp_path: Path, text: str, name: str) -> tuple[Path, pd.DataFrame]:
    exp = tmp_path / f"{name}.yaml"
    exp.write_text(text)
    out = tmp_path / name
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
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, pd.read_csv(out / "trials.csv", keep_default_na=False, na_values=["", "nan"])


@pytest.fixture(scope="module", params=["http", "rmi"])
def driver_run(request, tmp_path_factory):
    if request.param == "rmi":
        setup_kit.require_jdk(17)  # the rmi driver and server need one; make setup installs it
    tmp = tmp_path_factory.mktemp(f"contract-{request.param}")
    text = CONTRACT.format(driver=request.param, server=SERVERS[request.param])
    out, trials = perfctl_run(tmp, text, "run")
    return request.param, out, trials


def _cell(trials: pd.DataFrame, **values) -> dict:
    sel = trials
    for k, v in values.items():
        sel = sel[sel[k].astype(str) == str(v)]
    assert len(sel) == 1, (values, trials[list(values)])
    return sel.iloc[0].to_dict()


def _files(out: Path, row: dict) -> tuple[Path, pd.DataFrame, dict]:
    tdir = trial_dir(out, row["cell_id"], int(row["trial"]))
    return (
        tdir,
        pd.read_parquet(tdir / "requests.parquet"),
        json.loads((tdir / "summary.json").read_text()),
    )


def test_every_trial_has_the_columns_and_self_checks(driver_run):
    name, out, trials = driver_run
    assert (trials["load_driver"] == name).all()
    for row in trials.to_dict("records"):
        tdir, req, summary = _files(out, row)
        assert contract.check_output(tdir, row["load_mode"]) == []
        schema = pq.read_schema(tdir / "requests.parquet")
        for col, dtype in COLUMNS.items():
            assert schema.field(col).type.to_pandas_dtype() == np.dtype(dtype), col
        for key in contract.SUMMARY_KEYS + contract.SUMMARY_KEYS_BY_MODE.get(row["load_mode"], ()):
            assert isinstance(summary[key], (int, float)), key
        assert summary["requests_recorded"] == len(req)
        assert not np.isnan(row["loadgen_cpu_pct"]) and not np.isnan(row["loop_lag_p99_ms"])
        assert "DRIVER.md" not in str(row["invalid_reasons"]), row["invalid_reasons"]


def test_open_load_follows_the_schedule_perfctl_handed_over(driver_run):
    _, out, trials = driver_run
    row = _cell(trials, mode="open", timeout="2s")
    tdir, req, summary = _files(out, row)
    spec = json.loads((tdir / "spec.json").read_text())
    offsets = contract.read_schedule(tdir / spec["schedule_file"])
    assert len(offsets) == round(200 * 0.3) + round(200 * 1.5)
    intended = np.sort(req["intended_ns"].to_numpy()) - summary["start_ns"]
    assert np.array_equal(intended, offsets)  # every arrival, at its exact instant
    assert summary["scheduled_in_window"] == round(200 * 1.5)
    assert row["offered_rate"] == pytest.approx(200)
    ok = req[req["error"] == 0]
    assert (ok["sent_ns"] >= ok["intended_ns"]).all()
    assert len(ok) >= 0.9 * len(req), req["error"].value_counts()


def test_closed_and_burst_load_answer_and_carry_service_times(driver_run):
    name, out, trials = driver_run
    closed = _cell(trials, mode="closed", path="/work", timeout="2s")
    _, req, _ = _files(out, closed)
    assert (req["status"][req["error"] == 0] == 200).all() and len(req) > 50
    assert req["svc_ms"].notna().mean() > 0.9  # the server's own time came back
    assert (req["conn"] >= 0).all()
    burst = _cell(trials, mode="burst")
    _, req, summary = _files(out, burst)
    assert len(req) == 2 * 4  # bursts x connections attempts
    assert summary["release_spread_ms_max"] >= 0
    assert set(req["error"]) <= {0, 1, 2, 3}  # ok, refused, reset, timeout
    assert burst["window_s"] == pytest.approx(1.0)


def test_errors_are_classified(driver_run):
    _, out, trials = driver_run
    slow = _cell(trials, mode="closed", sleep_us=300000)
    _, req, summary = _files(out, slow)
    window = req[
        (req["intended_ns"] >= summary["measure_start_ns"])
        & (req["intended_ns"] < summary["measure_end_ns"])
    ]
    # each attempt times out; those still waiting when the phase ends are unfinished
    counts = window["error"].value_counts()
    assert len(window) > 0 and set(counts.index) <= {TIMEOUT, UNFINISHED}, counts
    assert counts[TIMEOUT] >= 0.5 * len(window), counts
    assert slow["errors_timeout"] + slow["errors_unfinished"] == slow["errors"] > 0
    assert not slow["valid"] and "error rate" in slow["invalid_reasons"]
    unknown = _cell(trials, path="/nope")
    _, req, _ = _files(out, unknown)
    assert (req["error"] == 0).all() and (req["status"] == 404).all()
    assert unknown["errors_http"] == unknown["requests"] > 0
    assert not unknown["valid"]


def test_broken_drivers_make_invalid_trials_with_the_reason(tmp_path):
    out, trials = perfctl_run(tmp_path, TOYS, "toys")
    by = {r["how"]: r for r in trials.to_dict("records")}
    assert set(by) == {
        "good",
        "exit",
        "no-column",
        "malformed",
        "no-summary",
        "short",
        "no-self-checks",
    }
    good = by["good"]
    assert (
        good["load_driver"] == "cmd"
        and good["requests"] > 20
        and "DRIVER.md" not in str(good["invalid_reasons"])
    ), good
    tdir, req, _ = _files(out, good)
    assert not (tdir / "requests.csv").exists()  # converted to requests.parquet
    assert req["svc_ms"].isna().all() and (req["conn"] == -1).all()  # optional columns filled
    expected = {
        "exit": "exited 1: toy driver: giving up on purpose",
        "no-column": "lacks column(s) done_ns",
        "malformed": "requests.csv is malformed",
        "no-summary": "no summary.json",
        "short": "summary.json says requests_recorded",
        "no-self-checks": "lacks loadgen_cpu_pct, loop_lag_p99_ms, gc_pause_max_ms",
    }
    for how, needle in expected.items():
        row = by[how]
        assert not row["valid"], how
        assert needle in row["invalid_reasons"], (how, row["invalid_reasons"])
        assert row["requests"] == 0, how
