"""The capacity search against a server whose answer is known in closed form: the reference
M/M/c server (servers/reference/mmc_server.py, started through `cmd:` like any user's
server) with 4 workers and exponential 4 ms services, SLO p99 <= 30 ms. Its sojourn time is
M/M/4's, so the rate at which p99 meets the SLO is exact (models.stations.rate_for_slo) once
its service time is known; the test takes the mean the server measured itself (Server-Timing
`svc`, its sleeps' overshoot included) over every probe, and the overhead outside the queue
from the single-user probe.

The search answers for trials of the length it ran (docs/capacity.md): with 5-s windows the
median trial of an ideal M/M/4 server meets the SLO a few per cent above the long-run closed
form, more when the host's timer overshoots each sleep (a near-constant added to an exponential
service: it queues less). tests/kits/window_truth.py simulates exactly that server's 5-s trials
(M/G/4 FIFO, Exp(4 ms) + the measured overshoot): 3-5% above the closed form here. The real
server's I/O thread shares the interpreter with its workers, which costs it some of that at
high load: three runs on one host (2026-11-27) gave intervals that held the closed form and
ended about 1% below the simulated truth; a CI run gave [792, 844]/s against a closed form of
776/s: above it, where the simulated truth (3-5% above the closed form) lies. So the truth is taken as the band between the two, and the
searched interval must reach it; both figures are in the message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
from window_truth import window_capacity

from loadgen import digest as ldigest
from models.stations import Station, rate_for_slo
from orchestrator.results import read_capacity, trial_dir

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "servers" / "reference" / "mmc_server.py"
SLEEP_MS, WARMUP_S, DURATION_S = 4.0, 1.0, 5.0

EXPERIMENT = f"""
name: mmc-search
servers:
  mmc: {{cmd: "{sys.executable} {SERVER} --port {{port}} --workers 4 --service-ms {SLEEP_MS:g}",
         threads: 4}}
load: {{mode: open, connections: 64, duration: {DURATION_S:g}s, warmup: {WARMUP_S:g}s}}
search: {{slo: {{p99: 30ms}}, max_trials: 10, include_noisy: true}}
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""


def _sums(run: Path, cell_id: str, trials) -> dict:
    total: dict = {}
    for k in trials:
        w = ldigest.read(trial_dir(run, cell_id, int(k)) / "digest.json")["windows"][0]
        for key in ("svc_n", "svc_sum_ms", "overhead_n", "overhead_sum_ms"):
            total[key] = total.get(key, 0.0) + w.sums[key]
    return total


def test_the_searched_interval_holds_the_mmc_servers_exact_capacity(tmp_path, perfctl_env):
    exp = tmp_path / "mmc.yaml"
    exp.write_text(EXPERIMENT)
    out = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(exp), "--out", str(out), "-q"],
        cwd=ROOT,
        env=perfctl_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Capacity under the SLO" in p.stdout
    [cell] = read_capacity(out)["cells"]
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) == cell["trials"] <= 10
    # the single-user probe, then the saturation probe; a probe the host spoiled is taken again
    # (CI once ran the first under a CPU steal of 17%: invalid, then retried, valid)
    roles = list(trials["search_role"])
    n_service = roles.index("saturation")
    assert n_service >= 1 and roles[:n_service] == ["service"] * n_service, roles
    retried = trials.iloc[: n_service - 1]
    assert (~retried["valid"].astype(bool) | ~retried["quiet"].astype(bool)).all(), retried
    knee = trials[trials["search_role"] == "knee"]
    assert (knee["target_rate"] == knee["search_level"]).all()
    assert knee["stationary"].notna().all()

    every = _sums(out, cell["cell_id"], trials["trial"])
    service_ms = every["svc_sum_ms"] / every["svc_n"]
    first = _sums(out, cell["cell_id"], trials["trial"][n_service - 1 : n_service])  # the kept one
    overhead_ms = max(0.0, first["overhead_sum_ms"] / first["overhead_n"])
    exact = rate_for_slo(
        Station("shared_queue", 4, service_ms / 1e3, overhead_s=overhead_ms / 1e3), "p99", 0.030
    )
    truth = window_capacity(
        workers=4,
        sleep_s=SLEEP_MS / 1e3,
        extra_s=max(0.0, service_ms - SLEEP_MS) / 1e3,
        overhead_s=overhead_ms / 1e3,
        q=99,
        slo_s=0.030,
        warmup_s=WARMUP_S,
        duration_s=DURATION_S,
        near_rps=exact,
    )
    seen = dict(truth=truth, closed_form=exact, service_ms=service_ms, overhead_ms=overhead_ms)
    assert cell["status"] == "found", cell
    # the truth lies between the long run's and the ideal 5-s trial's: the interval reaches it
    assert cell["low"] <= truth and exact <= cell["high"], (seen, cell["low"], cell["high"], cell)
    assert (out / "plots" / "capacity.png").is_file()
