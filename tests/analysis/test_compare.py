"""`perfctl compare`: statistics units, and real runs (unchanged config vs deliberate slowdown)."""
import math

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis import compare


# Identical runs on this shared 2-core host differ by ~10% in p50 and up to ~2x in p99
# (measured while writing these tests; one CI run saw p99 +57% and throughput -25% between
# two runs a minute apart), so the real-run tests gate at 150%: above that noise, and still
# far below the slowdown (2 ms of sleep on a ~0.5 ms request: p50 about +400%).
TOLERANCE = "1.5"


def test_holm_matches_hand_computation():
    adj = compare.holm([0.01, 0.04, 0.03, math.nan])
    assert adj[0] == pytest.approx(0.03)          # 3 * 0.01
    assert adj[2] == pytest.approx(0.06)          # 2 * 0.03
    assert adj[1] == pytest.approx(0.06)          # max(1 * 0.04, 0.06): monotone
    assert math.isnan(adj[3])


def test_beta_bootstrap_of_a_quantile_matches_resampling():
    rng = np.random.default_rng(7)
    x = np.sort(rng.lognormal(0, 1, 3000))
    fast = compare.bootstrap_quantile(x, 0.99, 4000, rng)
    slow = np.array([np.quantile(rng.choice(x, x.size), 0.99, method="inverted_cdf")
                     for _ in range(1500)])
    assert np.median(fast) == pytest.approx(np.median(slow), rel=0.05)
    assert np.std(fast) == pytest.approx(np.std(slow), rel=0.2)


@pytest.mark.slow
def test_unchanged_config_is_not_flagged(compare_runs, analysis):
    r = analysis("compare", compare_runs["base"], compare_runs["again"], "--tolerance", TOLERANCE)
    assert r.code == 0, r.output
    assert "slower" not in r.output.replace("significantly slower", "")
    cells, notes = compare.compare_runs(compare_runs["base"], compare_runs["again"],
                                        float(TOLERANCE))
    assert len(cells) == 1 and not notes
    assert cells[0].base_id == cells[0].cand_id        # matched by cell_id


@pytest.mark.slow
def test_deliberate_slowdown_is_caught(compare_runs, analysis):
    r = analysis("compare", compare_runs["base"], compare_runs["slow"], "--tolerance", TOLERANCE)
    assert r.code == 1, r.output
    assert "slower" in r.output and "regression" in r.output
    cells, _ = compare.compare_runs(compare_runs["base"], compare_runs["slow"], float(TOLERANCE))
    [c] = cells
    assert c.base_id != c.cand_id                      # sleep_us changes the cell_id
    assert c.verdict == "slower"
    p50 = c.metrics["p50"]
    assert p50.significant and p50.change > 0.5 and p50.ci[0] > 0
    # the other direction is an improvement, not a regression
    r = analysis("compare", compare_runs["slow"], compare_runs["base"], "--tolerance", TOLERANCE)
    assert r.code == 0 and "faster" in r.output, r.output


def test_compare_needs_run_dirs(tmp_path, analysis):
    r = analysis("compare", tmp_path / "nope", tmp_path / "nope2")
    assert r.code == 2 and "run.json" in r.output


def host_noise_only(run_dir):
    """Skip when the host was so busy that every trial of an unchanged run failed the load
    generator's own checks for host reasons (CI saw event-loop lag p99 of 9 ms and 3x the
    usual latency once): the gate then rightly refuses to pass, and there is nothing about
    the gate to learn from the run. Any other reason for an invalid trial still fails."""
    trials = pd.read_csv(run_dir / "trials.csv")
    if trials["valid"].astype(bool).any():
        return
    reasons = trials["invalid_reasons"].fillna("").astype(str)
    if reasons.str.contains("host busy|fell behind its schedule").all():
        pytest.skip(f"host too busy for a valid trial in {run_dir.name}: {reasons.iloc[0]}")


def test_slowdown_breaks_a_threshold_that_the_unchanged_runs_meet(compare_runs, analysis,
                                                                   tmp_path):
    """The same gate on real runs: 2 ms of added sleep puts p50 above 2 ms in every cell of
    the slow run, while the unchanged runs (sub-millisecond requests) stay below it."""
    gate = tmp_path / "gate.yaml"
    gate.write_text("thresholds:\n  - {p50_ms: {lt: 2.0}, error_rate: {lt: 0.01}}\n")
    for name in ("base", "again"):
        host_noise_only(compare_runs[name])
        r = analysis("check", compare_runs[name], "--thresholds", gate)
        assert r.code == 0, r.output
    r = analysis("check", compare_runs["slow"], "--thresholds", gate)
    assert r.code == 1 and "BREACH" in r.output, r.output
