"""`search:` in the experiment file: what it accepts, and one paragraph (exit 2) naming the key
and the fix for everything it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_kit import perfctl

from models.stations import percentile_of
from orchestrator.errors import PerfctlError
from orchestrator.experiment import compile_document
from orchestrator.experiment.search import percentile_q

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "name": "s",
    "servers": {"py": {"impl": "python", "model": "async"}},
    "load": {"mode": "open", "connections": 32, "duration": "5s", "warmup": "1s"},
    "search": {"slo": {"p99": "30ms", "error_rate": "0.1%"}, "precision": "2%"},
}


def compile_(**changes):
    doc = {**BASE, **changes}
    return compile_document(doc, "exp.yaml")


def test_a_search_plan_needs_no_rate_and_reads_every_field():
    plan = compile_()
    s = plan.experiment.search
    assert (s.slo.stat, s.slo.latency_ms, s.slo.error_rate) == ("p99", 30.0, 0.001)
    assert (s.precision, s.confidence, s.max_trials) == (0.02, 0.95, 8)
    assert plan.cells[0].load.rate_rps is None and plan.repeats == 8
    assert plan.search_trials() == (4, 8)
    assert plan.estimated_seconds(4) < plan.estimated_seconds(8)


@pytest.mark.parametrize(
    "stat, q, column",
    [("p99", 99.0, "latency_p99_ms"), ("p99.9", 99.9, "latency_p999_ms"), ("p95", 95.0, None)],
)
def test_any_percentile_may_be_the_slo(stat, q, column):
    plan = compile_(search={"slo": {stat: "40ms"}})
    slo = plan.experiment.search.slo
    assert percentile_q(stat) == q == percentile_of(stat)
    assert slo.column == column
    assert compile_(search={"slo": {"mean": "5ms"}}).experiment.search.slo.column == (
        "latency_mean_ms"
    )


def test_percentile_spellings_agree_with_the_models():
    for stat in ("p50", "p99", "p999", "p99.9", "p95", "p9999"):
        assert percentile_q(stat) == percentile_of(stat)
    for bad in ("p100", "px", "q99", "p0", "p"):
        with pytest.raises(ValueError):
            percentile_q(bad)


def test_open_load_without_a_rate_is_still_refused_without_search():
    doc = {k: v for k, v in BASE.items() if k != "search"}
    with pytest.raises(PerfctlError, match="open mode needs `rate`"):
        compile_document(doc, "exp.yaml")


@pytest.mark.parametrize(
    "changes, key, words",
    [
        (
            {"matrix": {"rate": [100, 200]}, "load": {**BASE["load"], "rate": "{rate}"}},
            "matrix.rate",
            "remove matrix.rate",
        ),
        ({"load": {**BASE["load"], "rate": 500}}, "load.rate", "remove load.rate"),
        (
            {"load": {**BASE["load"], "mode": "closed"}, "matrix": {"connections": [1, 2]}},
            "matrix.connections",
            "number of users",
        ),
        ({"load": {**BASE["load"], "mode": "burst"}}, "load.mode", "open (rates) or closed"),
        ({"repeats": 3}, "repeats", "search.max_trials"),
        ({"load": {**BASE["load"], "duration": "3s"}}, "load.duration", "5s or more"),
        ({"search": {"slo": {"p99": 30}}}, "search.slo", "no unit"),
        ({"search": {"slo": {"p99": "30parsecs"}}}, "search.slo", "not a duration"),
        ({"search": {"slo": {"p100": "30ms"}}}, "search.slo", "outside (0, 100)"),
        ({"search": {"slo": {"px": "30ms"}}}, "search.slo", "not a percentile"),
        ({"search": {"slo": {"p99": "30ms", "p50": "5ms"}}}, "search.slo", "exactly one"),
        (
            {"search": {"slo": {"p99": "30ms", "error_rate": "5 percent"}}},
            "search.slo",
            "error_rate",
        ),
        ({"search": {"slo": {"p99": "30ms"}, "precision": 2}}, "search.precision", "200%"),
        ({"search": {"slo": {"p99": "30ms"}, "max_trials": 3}}, "search.max_trials", "at least 4"),
        ({"search": {"slo": {"p99": "30ms"}, "budget": 8}}, "search.budget", "unknown key"),
        ({"search": {"precision": "2%"}}, "search.slo", "add it"),
    ],
)
def test_what_fights_the_search_is_refused_naming_the_key_and_the_fix(changes, key, words):
    with pytest.raises(PerfctlError) as e:
        compile_(**changes)
    text = str(e.value)
    assert f"key `{key}`" in text and words in text and "Fix:" in text


def test_the_cli_refuses_a_rate_axis_with_one_paragraph_and_exit_2(
    write_yaml, perfctl_env, assert_clean_error
):
    f = write_yaml(
        """
name: s
servers: {py: {impl: python, model: async}}
load: {mode: open, rate: "{rate}", duration: 5s}
matrix: {rate: [100, 200]}
search: {slo: {p99: 30ms}}
"""
    )
    p = perfctl("plan", str(f), env=perfctl_env, timeout=60)
    assert_clean_error(p, "exp.yaml", "matrix.rate", "Fix:")
    assert len([line for line in p.stderr.splitlines() if line.strip()]) <= 6


def test_plan_estimates_a_searchs_trials_and_wall_time(write_yaml, perfctl_env):
    f = write_yaml(
        """
name: s
servers: {py: {impl: python, model: async}, c: {impl: c, model: epoll}}
load: {mode: open, connections: 32, duration: 5s, warmup: 1s}
search: {slo: {p99: 30ms}, max_trials: 6}
"""
    )
    p = perfctl("plan", str(f), env=perfctl_env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "rate searched" in p.stdout
    assert "8 to 12 trials, estimated wall time" in p.stdout


def test_models_and_search_do_not_mix():
    with pytest.raises(PerfctlError, match="key `models`"):
        compile_(models=True)


def test_rate_auto_needs_a_search_and_a_sensible_count():
    assert compile_(matrix={"rate": "auto"}).curve_points == 8
    with pytest.raises(PerfctlError, match="key `matrix.rate`.*no search"):
        compile_document(
            {k: v for k, v in BASE.items() if k != "search"} | {"matrix": {"rate": "auto"}},
            "exp.yaml",
        )
    with pytest.raises(PerfctlError, match="key `matrix.rate.auto`"):
        compile_(matrix={"rate": {"auto": 1000}})
