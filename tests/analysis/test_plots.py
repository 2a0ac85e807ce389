"""Figures: every plot is written as PNG and SVG, for real and degenerate runs."""

import pandas as pd
import pytest

from orchestrator import results
from orchestrator.analysis import figures, run_figures

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed


@pytest.mark.usefixtures("live")
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


def test_draw_basic_skips_a_trial_that_measured_nothing_and_says_so(tmp_path):
    """A broken driver's row: requests 0, no figures (issue #32 finding 5)."""
    trials = _trials()
    broken = {
        "cell_id": "zz",
        "trial": 1,
        "server": "broken",
        "requests": 0,
        "errors": 0,
        "throughput_rps": 0.0,
        "valid": False,
        "invalid_reasons": "load driver cmd wrote output that breaks loadgen/DRIVER.md: x",
    }
    mixed = pd.concat([trials, pd.DataFrame([broken])], ignore_index=True)
    notes: list[str] = []
    paths = run_figures.draw_basic(mixed, ["server"], tmp_path, notes)
    assert len(paths) == 4
    assert notes == [
        "plots: left out 1 trial that measured nothing: load driver cmd wrote output that "
        "breaks loadgen/DRIVER.md"
    ]
    notes.clear()
    alone = pd.DataFrame([broken])  # every figure column missing, as in trials.csv then
    assert run_figures.draw_basic(alone, ["server"], tmp_path / "alone", notes) == []
    assert len(notes) == 1 and "measured nothing" in notes[0]


def test_a_figure_whose_column_has_no_value_is_skipped_and_named(tmp_path):
    trials = _trials().assign(latency_p99_ms=float("nan"))
    notes: list[str] = []
    paths = run_figures.draw_basic(trials, ["server"], tmp_path, notes)
    assert sorted(p.name for p in paths) == ["throughput.png", "throughput.svg"]
    assert notes == ["plots: no p99 latency figure: no trial has a value of latency_p99_ms"]
