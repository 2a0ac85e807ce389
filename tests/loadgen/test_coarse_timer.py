"""loadgen/coarse_timer.py: PERFCTL_EMULATE_COARSE_TIMER makes this host's timer a coarse
VM's for the load generator, seeded, so the coarse-timer paths run on every host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loadgen.coarse_timer import ENV, LATENESS_NS, QUANTILES, CoarseTimer

ROOT = Path(__file__).resolve().parents[2]


def test_draws_follow_the_table_and_repeat_with_the_seed():
    a, b = CoarseTimer(7), CoarseTimer(7)
    draws = np.array([a.draw() for _ in range(40_000)])
    assert draws.tolist()[:100] == [b.draw() for _ in range(100)]
    for q, v in zip(QUANTILES[1:-1], LATENESS_NS[1:-1]):
        assert np.quantile(draws, q) == pytest.approx(v, rel=0.1), q
    assert LATENESS_NS[0] <= draws.min() and draws.max() <= LATENESS_NS[-1]
    c = CoarseTimer(7)
    c.reseed(3, 1)  # another trial, another worker: another stream
    assert [c.draw() for _ in range(5)] != draws.tolist()[:5]


def test_the_switch_reads_seed_and_sleep_and_refuses_anything_else():
    assert CoarseTimer.from_env({}) is None
    assert not CoarseTimer.from_env({ENV: "41"}).sleep
    assert CoarseTimer.from_env({ENV: "41,sleep"}).sleep
    for bad in ("x", "41,spin", "-1"):
        with pytest.raises(ValueError, match=ENV):
            CoarseTimer.from_env({ENV: bad})


@pytest.mark.usefixtures("live")
@pytest.mark.untimed  # the emulated lateness only adds to the host's: a busy host cannot hide it
def test_the_generator_under_the_emulated_timer_sends_late_as_the_vm_would(c_server, tmp_path):
    """Sleeping to each instant (`,sleep`), the generator's sends are as late as the VM's
    timer makes them (p50 above the table's 50 us), and the summary says it was emulated;
    without the switch, on this host, they are not."""

    def run(env_value):
        out = tmp_path / f"out-{env_value}"
        out.mkdir()
        spec = tmp_path / f"spec-{env_value}.json"
        spec.write_text(
            json.dumps(
                {
                    "host": "127.0.0.1",
                    "port": c_server.port,
                    "target": "/health",
                    "mode": "open",
                    "rate_rps": 300,
                    "connections": 4,
                    "duration_s": 2.0,
                    "warmup_s": 0.2,
                    "timeout_s": 2.0,
                    "seed": 5,
                }
            )
        )
        env = {k: v for k, v in os.environ.items() if k != ENV}
        if env_value:
            env[ENV] = env_value
        proc = subprocess.run(
            [sys.executable, "-m", "loadgen", str(spec), str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads((out / "summary.json").read_text())

    coarse = run("41,sleep")
    assert coarse["emulated_coarse_timer"] == "sleep"
    assert coarse["send_lateness_p50_ms"] > 0.05, coarse["send_lateness_p50_ms"]
    assert "emulated_coarse_timer" not in run("")
