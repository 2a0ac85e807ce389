"""measure/hostcheck.py: the host's timer, wake-up, steal and loopback figures, and the words
that say what they limit."""

from __future__ import annotations

import math

import pytest

from orchestrator.measure.hostcheck import HostCheck, measure, verdict


def quiet_host(**over) -> HostCheck:
    base = dict(
        timer_p50_us=60.0,
        timer_p99_us=150.0,
        wake_p50_us=20.0,
        wake_p99_us=80.0,
        loopback_rtt_p50_us=25.0,
        loopback_rtt_p99_us=60.0,
        steal_pct=0.0,
        cpus=2,
        duration_s=2.0,
    )
    base.update(over)
    return HostCheck(**base)


@pytest.mark.usefixtures("live")
def test_a_short_check_measures_every_figure_on_this_host():
    c = measure(0.45)
    for name in (
        "timer_p50_us",
        "timer_p99_us",
        "wake_p50_us",
        "wake_p99_us",
        "loopback_rtt_p50_us",
        "loopback_rtt_p99_us",
    ):
        v = getattr(c, name)
        assert math.isfinite(v) and v >= 0, (name, v)  # a sleep never returns early
    assert c.timer_p99_us >= c.timer_p50_us and c.loopback_rtt_p99_us >= c.loopback_rtt_p50_us
    assert c.loopback_rtt_p50_us > 0 and c.wake_p50_us > 0
    assert 0 <= c.steal_pct <= 100 and 0.4 < c.duration_s < 5


def test_a_quiet_host_gets_no_warning():
    assert verdict(quiet_host()) == []


def test_a_slow_timer_is_named_with_its_numbers_and_the_latencies_it_limits():
    [line] = verdict(quiet_host(timer_p99_us=3900.0, timer_p50_us=182.0))
    assert "3.9 ms late" in line and "p50 182 us" in line
    assert "under ~78 ms" in line  # 3.9 ms is 5% of 78 ms


def test_steal_is_named_with_its_share():
    [line] = verdict(quiet_host(steal_pct=11.0))
    assert "steal 11.0%" in line and "not quiet" in line


@pytest.mark.usefixtures("live")
def test_a_run_measures_the_host_first_records_it_and_seeds_the_load_generator(
    write_yaml, perfctl_env, tmp_path
):
    import json
    import subprocess
    import sys

    from orchestrator.proc.build import ROOT

    exp = write_yaml(
        """
name: hostcheck
servers:
  py: {impl: python, model: async}
load: {mode: open, rate: 200, connections: 4, duration: 1s, warmup: 0s}
repeats: 1
"""
    )
    out = tmp_path / "run"
    env = {**perfctl_env, "PERFCTL_HOST_CHECK_S": "0.4"}
    p = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(exp), "--out", str(out), "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "host: timer late p50" in p.stdout
    check = json.loads((out / "run.json").read_text())["host_check"]
    assert check["duration_s"] > 0.3 and "verdict" in check
    [spec] = list(out.glob("cells/*/trial-1/spec.json"))
    assert json.loads(spec.read_text())["early_wake_ns"] == int(check["timer_p99_us"] * 1e3)
    r = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "<h2>This host</h2>" in (out / "report.html").read_text()


def test_doctor_shows_the_host_figures_and_can_leave_them_out(perfctl_env):
    import json
    import subprocess
    import sys

    from orchestrator.proc.build import ROOT

    def doctor(*args):
        p = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "doctor", *args],
            cwd=ROOT,
            env=perfctl_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    measured = json.loads(doctor("--json", "--seconds", "0.3"))
    assert measured["host_check"]["loopback_rtt_p50_us"] > 0
    # the send-precision table: the three waits, each with its lateness and its CPU
    waits = {w["wait"]: w for w in measured["send_precision"]["waits"]}
    assert list(waits) == ["sleep", "sleep+spin", "spin"]
    assert all(w["p50_us"] >= 0 and w["p99_us"] >= w["p50_us"] for w in waits.values())
    assert waits["spin"]["cpu_pct"] > waits["sleep"]["cpu_pct"]  # spinning costs its CPU
    assert "send_precision" not in json.loads(doctor("--json", "--no-measure"))
    text = doctor("--seconds", "0.3")
    assert "this host, measured for" in text and "how late a send can leave here" in text
