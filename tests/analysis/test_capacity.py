"""A search run's capacities in the analysis commands: check's capacity thresholds, compare's
capacity verdicts, the capacity figure and the report's section, the summary's table. The
runs are written by hand (capacity.json, trials.csv, run.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from orchestrator import results
from orchestrator.analysis import check, compare
from orchestrator.analysis.capacity_compare import compare_capacities
from orchestrator.analysis.report import build
from orchestrator.analysis.search_figures import capacity_figure
from orchestrator.api.summary import capacity_table
from orchestrator.errors import PerfctlError
from orchestrator.results.schema import read_capacity, write_capacity

SLO = {"stat": "p99", "latency_ms": 30.0, "error_rate": 0.001}


def cell(cid: str, server: str, cap: float, half: float, df: int = 4, **kw) -> dict:
    """A capacity.json cell whose interval is cap * exp(+-t se) with half-width ~`half`."""
    se = half / 2.78 if df else math.nan
    lo, hi = (cap * math.exp(-2.78 * se), cap * math.exp(2.78 * se)) if df else (None, None)
    probes = [
        {
            "trial": 1,
            "role": "service",
            "level": 1,
            "latency_ms": 18.0,
            "used": True,
            "verdict": "model",
        },
        {
            "trial": 2,
            "role": "saturation",
            "level": 16,
            "latency_ms": 60.0,
            "used": True,
            "verdict": "model",
        },
        {
            "trial": 3,
            "role": "knee",
            "level": cap * 0.97,
            "latency_ms": 27.0,
            "used": True,
            "verdict": "estimate",
            "capacity_estimate": cap,
        },
        {
            "trial": 4,
            "role": "knee",
            "level": cap * 1.02,
            "latency_ms": 33.0,
            "used": False,
            "verdict": "not used (failed twice): noisy: other processes",
        },
        {
            "trial": 5,
            "role": "knee",
            "level": cap * 1.2,
            "latency_ms": 300.0,
            "used": True,
            "verdict": "upper bound: overloaded (latency rising through the window)",
        },
    ]
    out = {
        "cell_id": cid,
        "label": f"server={server}",
        "values": {"server": server},
        "load_mode": "open",
        "unit": "rate_rps",
        "status": "found" if df else "no interval",
        "capacity": cap,
        "low": lo,
        "high": hi,
        "confidence": 0.95,
        "half_width_pct": 100 * half if df else None,
        "precision_pct": 2.0,
        "precision_reached": half <= 0.02,
        "knee_probes": df + 1,
        "df": df,
        "log_sd": 0.05,
        "log_se": se if df else None,
        "upper_bound": None,
        "stopped": "max_trials (8) reached",
        "trials": 8,
        "wall_s": 64.0,
        "model": {"name": "M/M/4", "calibration": 1.0},
        "curve": {"level": [cap * 0.5, cap, cap * 1.1], "latency_ms": [10.0, 30.0, 45.0]},
        "probes": probes,
        "notes": [],
    }
    out.update(kw)
    return out


def search_run(path: Path, cells: list[dict], thresholds: list | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "cell_id": c["cell_id"],
            "trial": p["trial"],
            "server": c["values"]["server"],
            "search_role": p["role"],
            "search_level": p["level"],
            "valid": True,
            "quiet": True,
            "throughput_rps": 100.0,
            "latency_p99_ms": p["latency_ms"],
            "latency_p50_ms": p["latency_ms"] / 3,
            "latency_mean_ms": p["latency_ms"] / 2,
            "latency_max_ms": p["latency_ms"] * 2,
            "error_rate": 0.0,
            "errors": 0,
            "requests": 500,
            "load_mode": "open" if p["role"] == "knee" else "closed",
        }
        for c in cells
        for p in c["probes"]
    ]
    pd.DataFrame(rows).to_csv(path / "trials.csv", index=False)
    info = {
        "experiment": "cap",
        "source": str(path / "exp.yaml"),
        "axes": ["server"],
        "cells": [{"cell_id": c["cell_id"], "values": c["values"]} for c in cells],
        "document": {"name": "cap", "thresholds": thresholds or []},
    }
    (path / "run.json").write_text(json.dumps(info))
    write_capacity(
        path,
        {
            "experiment": "cap",
            "search": {"slo": SLO, "precision": 0.02, "confidence": 0.95, "max_trials": 8},
            "axes": ["server"],
            "cells": cells,
        },
    )
    return path


def test_capacity_json_round_trips_with_nulls_for_what_is_not_finite(tmp_path):
    run = search_run(tmp_path, [cell("a", "c", 800.0, 0.03, df=0)])
    raw = json.loads((run / "capacity.json").read_text())
    assert raw["cells"][0]["low"] is None and raw["cells"][0]["upper_bound"] is None
    doc = read_capacity(run)
    assert math.isnan(doc["cells"][0]["low"]) and doc["cells"][0]["upper_bound"] == math.inf
    assert read_capacity(tmp_path / "nowhere") is None


def test_check_gates_on_the_searched_capacity_and_names_its_interval(tmp_path):
    ths = [{"capacity_rps": {"gt": 750}}, {"where": {"server": "j"}, "capacity_rps": {"gt": 790}}]
    run = search_run(tmp_path, [cell("a", "c", 800.0, 0.02), cell("b", "j", 795.0, 0.05)], ths)
    verdicts = check.check_run(run)
    assert [(v.cell_label, v.passed) for v in verdicts] == [
        ("server=c", True),
        ("server=j", True),
        ("server=j", True),
    ]
    assert "95% interval" in verdicts[0].note and verdicts[0].trials == 5
    assert verdicts[0].excluded == 1  # the noisy probe
    assert "straddles 790" in verdicts[2].note  # 795 +- 5%: the evidence cannot tell


def test_a_capacity_threshold_on_a_run_without_a_search_is_a_breach(tmp_path):
    run = search_run(tmp_path, [cell("a", "c", 800.0, 0.02)], [{"capacity_rps": {"gt": 1}}])
    (run / "capacity.json").unlink()
    [v] = check.check_run(run)
    assert not v.passed and "no capacity.json" in v.note
    with pytest.raises(PerfctlError, match="capacity_rps or capacity_users"):
        check.parse([{"capacity_qps": {"gt": 1}}], "t.yaml", ["server"])


def test_a_cell_without_a_capacity_fails_its_threshold(tmp_path):
    missing = cell("a", "c", math.nan, 0.02, df=0, status="failed", capacity=None)
    run = search_run(tmp_path, [missing], [{"capacity_rps": {"gt": 1}}])
    [v] = check.check_run(run)
    assert not v.passed and "no capacity found" in v.note


def test_compare_says_slower_when_the_capacity_dropped_beyond_the_tolerance(tmp_path):
    base = search_run(tmp_path / "a", [cell("a", "c", 1000.0, 0.02), cell("b", "j", 500.0, 0.02)])
    cand = search_run(tmp_path / "b", [cell("a", "c", 850.0, 0.02), cell("b", "j", 502.0, 0.01)])
    result = compare.compare_runs(base, cand)
    by = {c.label: c for c in result.capacities}
    assert by["server=c"].verdict == "slower" and by["server=c"].change == pytest.approx(-0.15)
    assert by["server=c"].ci[1] < 0
    assert by["server=j"].verdict == "no significant change"
    assert compare.regressed(result.capacities) and not result.cells


def test_compare_is_inconclusive_when_the_evidence_is_thin(tmp_path):
    base = search_run(tmp_path / "a", [cell("a", "c", 1000.0, 0.10), cell("b", "j", 500.0, 0.02)])
    cand = search_run(
        tmp_path / "b", [cell("a", "c", 970.0, 0.10), cell("b", "j", 480.0, 0.02, df=0)]
    )
    by = {c.label: c for c in compare.compare_runs(base, cand).capacities}
    assert by["server=c"].verdict == "inconclusive"
    assert "neither shows a change nor rules out one" in " ".join(by["server=c"].notes)
    assert by["server=j"].verdict == "inconclusive" and "no interval" in by["server=j"].notes[0]


def test_compare_refuses_a_search_against_a_run_without_one(tmp_path):
    base = search_run(tmp_path / "a", [cell("a", "c", 1000.0, 0.02)])
    cand = search_run(tmp_path / "b", [cell("a", "c", 1000.0, 0.02)])
    (cand / "capacity.json").unlink()
    with pytest.raises(PerfctlError, match="capacity search"):
        compare.compare_runs(base, cand)


def test_the_capacity_change_interval_is_the_sum_of_both_sides_log_variances():
    b = {"cells": [cell("a", "c", 1000.0, 0.0278, df=1000)]}
    c = {"cells": [cell("a", "c", 1000.0, 0.0278, df=1000)]}
    [ch] = compare_capacities(b, c, [("a", "a", "x")], 0.05, 0.05)
    se = 0.0278 / 2.78 * math.sqrt(2)
    assert ch.ci[1] == pytest.approx(math.exp(1.962 * se) - 1, rel=0.01)
    assert ch.verdict == "no significant change" and ch.p == pytest.approx(1.0)


def test_the_figure_and_the_report_show_the_capacity(tmp_path):
    run = search_run(tmp_path / "r", [cell("a", "c", 800.0, 0.02), cell("b", "j", 400.0, 0.05)])
    fig = capacity_figure(read_capacity(run), tmp_path / "plots")
    assert fig is not None and fig.png.stat().st_size > 1000
    html = build(run).read_text()
    assert "Capacity under the SLO" in html and "800" in html and "fig-capacity" in html
    assert "not used (failed twice): noisy" in html


def test_the_summary_prints_capacity_and_interval_per_cell(tmp_path):
    from rich.console import Console

    doc = read_capacity(search_run(tmp_path, [cell("a", "c", 812.0, 0.03)]))
    con = Console(width=200, record=True)
    con.print(capacity_table(doc, ["server"]))
    text = con.export_text()
    assert "812/s" in text and "3.0%" in text and "Capacity under the SLO" in text
    assert "trial 4 (knee): not used (failed twice)" in text
    assert results.read_capacity(tmp_path)["cells"][0]["capacity"] == 812.0
