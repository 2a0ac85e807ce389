"""A delay axis end to end: the proxy injects it, every trial proves it took effect."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]

DELAYS = """
name: delays
servers:
  py: {impl: python, model: async}
workload: {path: /work, params: {spin_us: 50}}
load: {mode: closed, connections: 2, duration: 1500ms, warmup: 300ms}
network: {delay: "{delay}"}
matrix: {delay: [0ms, 10ms, 50ms]}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


def test_delay_axis_is_injected_and_verified(write_yaml, perfctl_env, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(write_yaml(DELAYS)),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=perfctl_env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    t = pd.read_csv(out / "trials.csv").set_index("delay")
    assert t.loc["0ms", "network_backend"] == "none"
    for delay, rtt in (("10ms", 20.0), ("50ms", 100.0)):
        row = t.loc[delay]
        assert row["network_backend"] == "proxy"
        assert row["rtt_expected_ms"] == pytest.approx(rtt)
        # the verdict's own tolerance: max(10%, 0.5 ms) on the added RTT, before and after
        assert abs(row["rtt_measured_ms"] - rtt) <= max(0.1 * rtt, 0.5), row.to_dict()
        assert "network injection" not in str(row["invalid_reasons"])
        # every request crossed the path twice: latency >= the added round trip
        assert row["latency_min_ms"] >= rtt * 0.95
        # the proxy's send() returns after its release, chunk by chunk
        assert 0 <= row["release_error_p50_us"] <= row["send_done_error_p50_us"], row.to_dict()
    assert json.loads((out / "run.json").read_text())["network_backend"] == ["none", "proxy"]


def test_injection_that_misses_marks_the_trial_invalid():
    from orchestrator.experiment.network import Network
    from orchestrator.netem.expected import expected_rtt_p50_ms
    from orchestrator.netem.probe import ProbeResult
    from orchestrator.run.trial_row import network_row

    class Fake:
        backend = "proxy"
        spec = Network.model_validate({"delay": "10ms"})

        def check(self, probe, state=None):
            from orchestrator.netem import verify

            return verify(expected_rtt_p50_ms(state or self.spec), probe.added_p50_ms)

    off = ProbeResult(method="echo-rtt", rtt_ms=[30.0] * 5, baseline_ms=0.1)
    row, reasons = network_row(Fake.spec, Fake(), [("before", off, Fake.spec)])
    assert row["rtt_measured_before_ms"] == pytest.approx(29.9)
    assert reasons and "network injection off before the load" in reasons[0]


SCHEDULE = """
name: schedule
servers:
  py: {impl: python, model: async}
workload: {path: /work}
load: {mode: closed, connections: 2, duration: 2500ms, warmup: 500ms}
network: {delay: 1ms, schedule: [{at: 1500ms, delay: 15ms}]}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


def test_network_schedule_changes_mid_trial_and_lands_in_the_timeline(
    write_yaml, perfctl_env, tmp_path
):
    """The step takes effect at its `at` (timeline t = 0 is the load's start), the timeline
    says when, and the requests after it cross the new delay."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(write_yaml(SCHEDULE)),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=perfctl_env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = pd.read_csv(out / "trials.csv").iloc[0]
    assert row["network_changes"] == 1
    assert row["rtt_expected_after_ms"] == pytest.approx(30.0)
    assert "network injection" not in str(row["invalid_reasons"]), row["invalid_reasons"]
    tdir = next((out / "cells").glob("*/trial-*"))
    change = json.loads((tdir / "network_changes.json").read_text())["changes"][0]
    assert change["at_s"] == pytest.approx(1.5)
    assert abs(change["applied_s"] - 1.5) <= 0.1, change
    tl = pd.read_parquet(tdir / "timeline.parquet")
    assert tl.loc[tl["t_s"] == 1.0, "network_change_s"].iloc[0] == pytest.approx(
        change["applied_s"]
    )
    assert list(tl["network_step"]) == [0] + [1] * (len(tl) - 1)
    # requests sent well after the change cross 2 x 15 ms, those well before 2 x 1 ms
    req = pd.read_parquet(tdir / "requests.parquet")
    summary = json.loads((tdir / "summary.json").read_text())
    t_s = (req["sent_ns"] - summary["start_ns"]) / 1e9
    lat_ms = (req["done_ns"] - req["sent_ns"]) / 1e6
    before = lat_ms[t_s < change["applied_s"] - 0.2]
    if len(before):  # none when a very busy host started the load generator late
        assert before.median() < 10
    assert lat_ms[t_s > change["applied_s"] + 0.2].min() >= 30 * 0.95
