"""Validity that scales with the measurement, on real trials (issue #32 finding 1): the same
send lateness leaves a 20 ms latency valid and invalidates a sub-millisecond one.

A driver that sends every arrival 200 us late (late_driver.py: a client with a timer that
coarse) runs open load against the bundled Python server, once with a 20 ms sleep per request
and once with no work: 200 us is 1% of the first latency and most of the second. The bundled
HTTP generator at 20 ms then shows the shift it measured beside the figures.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import quiet_kit

ROOT = Path(__file__).resolve().parents[2]
LATE = Path(__file__).resolve().parent / "late_driver.py"
SHIFTS = [f"lateness_shift_{k}_pct" for k in ("mean", "p50", "p90", "p99", "p999")]

EXPERIMENT = """
name: validity
servers:
  py: {{impl: python, model: async}}
workload: {{path: /work, params: {{sleep_us: "{{sleep_us}}"}}}}
load: {{driver: {driver}, mode: open, rate: 50, keepalive: false, connections: 8,
        duration: 3s, warmup: 500ms}}
matrix: {{sleep_us: [0, 20000]}}
"""


def perfctl_run(write_yaml, perfctl_env, tmp_path, driver: str, attempt: int = 0) -> pd.DataFrame:
    out = tmp_path / f"run{attempt}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(write_yaml(EXPERIMENT.format(driver=driver))),
            "--out",
            str(out),
            "--no-plots",
        ],
        cwd=ROOT,
        env=perfctl_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    trials = pd.read_csv(out / "trials.csv", keep_default_na=False, na_values=["", "nan"])
    return trials.set_index("sleep_us")


def _verdicts_wrong(slow: pd.Series, fast: pd.Series) -> list[str]:
    """What the two trials' verdicts got wrong for a driver that sends every arrival 200 us
    late; [] when nothing."""
    wrong = []

    def want(ok: bool, what: str) -> None:
        if not ok:
            wrong.append(what)

    want(slow["requests"] == fast["requests"] == 150, "every arrival sent (rate x window)")
    want(
        slow["send_lateness_p99_ms"] >= 0.2 and fast["send_lateness_p99_ms"] >= 0.2,
        "lateness p99 >= 0.2 ms in both",
    )
    want(slow["latency_p50_ms"] > 20, "the 20 ms trial's p50 above 20 ms")
    want(not fast["valid"], "the no-work trial invalid")
    want(
        "send lateness" in str(fast["invalid_reasons"]) and "Fix:" in str(fast["invalid_reasons"]),
        "the no-work trial invalid for lateness, with a fix",
    )
    want(fast["lateness_shift_of_precision"] > 1, "the no-work shift beyond its precision")
    # every send is at least 200 us late, so the p50 moved by at least that much of itself
    want(
        fast["lateness_shift_p50_pct"] >= 0.99 * 100 * 0.2 / fast["latency_p50_ms"],
        "the no-work p50 moved by at least 200 us",
    )
    want(bool(slow["valid"]), f"the 20 ms trial valid ({slow['invalid_reasons']})")
    want(slow["lateness_shift_of_precision"] < 1, "the 20 ms shift within its precision")
    want(0.5 < slow["lateness_shift_p50_pct"] < 2, "the 20 ms p50 moved by ~1% (200 us of 20.3 ms)")
    return wrong


@pytest.mark.needs_quiet
def test_200_us_of_lateness_is_valid_at_20_ms_and_invalid_at_no_work(
    write_yaml, perfctl_env, tmp_path
):
    """Needs quiet: the host letting the 200 us driver send at most 1 ms late at p99 in the
    20 ms trial, when the verdicts are not right anyway (CI once saw a load average of 15 on
    2 CPUs make it 8 ms late: then that trial's figures did move and it is rightly invalid,
    but the premise is gone). Every attempt is judged; one that is wrong on a busy host is
    taken again (quiet_kit), one that is wrong on a quiet host fails at once."""
    driver = f'{{cmd: "{sys.executable} {LATE} 200 {{spec}} {{out}}"}}'

    def spoiled(trials: pd.DataFrame) -> str | None:
        wrong = _verdicts_wrong(trials.loc[20000], trials.loc[0])
        late = round(float(trials.loc[20000, "send_lateness_p99_ms"]), 2)
        return f"lateness p99 {late} ms, wrong: {wrong}" if wrong and late > 1.0 else None

    trials = quiet_kit.until_quiet(
        lambda attempt: perfctl_run(write_yaml, perfctl_env, tmp_path, driver, attempt),
        spoiled,
        "a 200 us driver sending at most 1 ms late",
    )
    wrong = _verdicts_wrong(trials.loc[20000], trials.loc[0])
    assert not wrong, f"on a quiet host (lateness p99 <= 1 ms): wrong: {wrong}"


def test_the_bundled_generator_reports_the_shift_it_measured(write_yaml, perfctl_env, tmp_path):
    """Whether its trials pass depends on this host's timer and load (the shared test VM can
    be late by a mean 0.7 ms); that the verdict follows the shift it reports does not."""
    trials = perfctl_run(write_yaml, perfctl_env, tmp_path, "http")
    for sleep_us in (0, 20000):
        t = trials.loc[sleep_us]
        for col in SHIFTS + ["lateness_shift_of_precision"]:
            assert math.isfinite(t[col]) and t[col] >= 0, (sleep_us, col, t[col])
        late = "send lateness" in str(t["invalid_reasons"])
        assert late == (t["lateness_shift_of_precision"] > 1), t["invalid_reasons"]
    assert trials.loc[0, "latency_p50_ms"] < trials.loc[20000, "latency_p50_ms"] / 10
