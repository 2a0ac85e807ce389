"""`perfctl model` on live runs of servers whose queue is known: the reference M/M/c server
started through `cmd:` without Server-Timing and without declaring how it dispatches (the probe
says, a single-user probe gives S), and the C `pool` server with more keep-alive connections
than threads (the model is rejected, naming connection pinning). A few seconds of load each.
Every prediction printed carries its verdict; every cell its bottleneck line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import ROOT, perfctl_run

pytestmark = pytest.mark.usefixtures("live")

REFERENCE = f"""
name: reference-bare
servers:
  ref: {{cmd: "{sys.executable} {ROOT}/servers/reference/mmc_server.py --port {{port}} --workers {{threads}} --service-ms 4 --no-server-timing",
         threads: "{{threads}}"}}
workload: {{path: /work}}
load: {{mode: open, rate: 400, connections: 32, duration: 3s, warmup: 1s}}
matrix: {{threads: [4]}}
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""

PINNED = """
name: pool-pinned
models: true
servers:
  pool: {impl: c, model: pool, threads: 2}
workload: {path: /work, params: {sleep_us: 4000, dist: exp}}
load: {mode: open, rate: 150, connections: 16, duration: 3s, warmup: 1s, timeout: 1s}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    return perfctl_run(REFERENCE, tmp_path_factory.mktemp("ref"), "run")


def test_a_server_we_did_not_write_without_server_timing_gets_a_prediction_and_a_verdict(
    reference_run, analysis
):
    r = analysis("model", reference_run, "--no-plots")
    assert r.code == 0, r.output
    [cell] = json.loads((reference_run / "models.json").read_text())["cells"]
    assert cell["service_source"] == "single_user_probe"
    assert cell["dispatch_source"] == "probe" and cell["dispatch"] == "shared_queue"
    assert cell["pred_mean_ms"] > 4.0 and cell["pred_mean_low_ms"] < cell["pred_mean_ms"]
    for stat in ("mean", "p99"):
        assert cell[f"verdict_{stat}"] in ("held", "rejected", "inconclusive")
        assert cell[f"verdict_{stat}"] in r.output
    assert "bottleneck:" in r.output and "workers" in r.output
    assert "single user probe" in r.output


def test_what_if_predicts_another_configuration_and_refuses_a_bad_key(reference_run, analysis):
    r = analysis("model", reference_run, "--no-plots", "--what-if", "threads=8")
    assert r.code == 0, r.output
    assert "What if threads=8" in r.output and "M/M/8" in r.output
    doc = json.loads((reference_run / "models.json").read_text())
    assert doc["what_if"]["changes"] == {"threads": 8.0}
    bad = analysis("model", reference_run, "--what-if", "workers=8")
    assert bad.code == 2 and "threads, cores, rate, users, delay" in bad.output


def test_run_what_if_runs_the_changed_configuration_and_judges_the_prediction(
    reference_run, analysis
):
    r = analysis("model", reference_run, "--no-plots", "--what-if", "threads=2", "--run-what-if")
    assert r.code == 0, r.output
    out = reference_run / "what-if" / "threads2"
    assert (out / "trials.csv").is_file()
    assert "predicted (fitted on run) vs measured" in r.output
    assert any(v in r.output for v in ("held", "rejected", "inconclusive"))


def test_a_pool_server_with_more_keepalive_connections_than_threads_is_rejected_for_pinning(
    tmp_path, analysis
):
    exp = tmp_path / "pinned.yaml"
    exp.write_text(PINNED)
    run = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(exp),
            "--out",
            str(run),
            "--no-plots",
            "-q",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the summary after the run: the prediction with its verdict, the bottleneck line
    assert "rejected: connection pinning" in done.stdout and "bottleneck:" in done.stdout
    r = analysis("model", run, "--no-plots")
    assert r.code == 0, r.output
    [cell] = json.loads((run / "models.json").read_text())["cells"]
    assert cell["dispatch"] == "per_connection" and cell["dispatch_source"] == "catalogue"
    assert cell["verdict"] == "rejected"
    assert "connection pinning: 16 keep-alive connections on 2" in cell["verdict_causes"]
    assert "rejected" in r.output and "connection pinning" in r.output
