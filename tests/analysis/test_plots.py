"""Figures: every plot is written as PNG and SVG, for real and degenerate runs."""

import pandas as pd
import pytest

from orchestrator import results
from orchestrator.analysis import figures, run_figures


@pytest.mark.slow
def test_draw_run_writes_every_figure(small_run, tmp_path):
    run = results.load(small_run)
    figs = run_figures.draw_run(run, tmp_path)
    names = [f.name for f in figs]
    assert names == [
        "throughput",
        "latency_percentiles",
        "latency_p99",
        "error_rate",
        "timeline",
        "latency_spectrum",
    ]
    for f in figs:
        assert f.title and f.caption
        for p in f.paths:
            assert p.stat().st_size > 1000
    assert {p.suffix for f in figs for p in f.paths} == {".png", ".svg"}


def test_load_series_picks_the_axis_that_varies_per_group():
    trials = pd.DataFrame(
        {
            "cell_id": list("abcde"),
            "server": ["py"] * 5,
            "mode": ["closed", "closed", "closed", "open", "open"],
            "connections": [1, 4, 16, 16, 16],
            "rate": [300, 300, 300, 300, 600],
        }
    )
    series = figures.load_series(trials, ["server", "mode", "connections", "rate"])
    got = {s.label: (s.x_axis, list(s.rows["_x"])) for s in series}
    assert got == {
        "py, mode=closed": ("connections", [1, 4, 16]),
        "py, mode=open": ("rate", [300, 600]),
    }


def _trials(**over):
    base = {
        "cell_id": ["a", "b"],
        "trial": [1, 1],
        "server": ["x", "y"],
        "throughput_rps": [100.0, 200.0],
        "latency_p99_ms": [1.0, 50.0],
        "latency_p50_ms": [0.5, 5.0],
        "latency_p90_ms": [0.8, 20.0],
        "latency_p999_ms": [2.0, 80.0],
        "error_rate": [0.0, 0.1],
        "errors": [0, 3],
        "valid": [True, False],
        "target_rate": [float("nan")] * 2,
    }
    base.update(over)
    return pd.DataFrame(base)


def test_draw_basic_without_numeric_axis(tmp_path):
    paths = run_figures.draw_basic(_trials(), ["server"], tmp_path)
    assert sorted(p.name for p in paths) == [
        "latency_p99.png",
        "latency_p99.svg",
        "throughput.png",
        "throughput.svg",
    ]
    for f in (
        run_figures.percentiles_figure(_trials(), ["server"], tmp_path),
        run_figures.error_rate_figure(_trials(), ["server"], tmp_path),
    ):
        assert f.png.stat().st_size > 1000


def test_one_colour_per_server_is_stable():
    a = figures.server_colours(["b", "a"])
    b = figures.server_colours(["a", "b", "c"])
    assert a["a"] == b["a"] and a["b"] == b["b"]
