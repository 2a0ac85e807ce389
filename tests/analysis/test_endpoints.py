"""Per-endpoint figures of a mix (endpoints.csv) in the analysis: run.endpoints, `perfctl
compare` endpoint by endpoint, thresholds with `where: {endpoint: NAME}`, the report's table."""

import pytest

from orchestrator import results
from orchestrator.analysis import check, compare, report
from orchestrator.errors import PerfctlError
from orchestrator.results import trial_dir
from orchestrator.results.endpoints import write_endpoints

from .conftest import synthetic_run
from .test_compare import P50, _rows


def _endpoint_row(name, k, p99, requests=1000, errors=0, validity=""):
    return {
        "endpoint": name,
        "request": k,
        "share": 0.5,
        "requests": requests,
        "completed": requests,
        "errors": errors,
        "error_rate": errors / requests,
        "throughput_rps": requests / 2,
        "latency_mean_ms": p99 / 3,
        "latency_p50_ms": p99 / 4,
        "latency_p90_ms": p99 / 2,
        "latency_p99_ms": p99,
        "latency_max_ms": p99 * 2,
        "valid": not validity,
        "validity": validity,
    }


def _mixed_run(path, login_p99s, validity=""):
    """Five valid trials of one cell whose whole figures are P50; endpoint `work` steady at
    p99 2 ms, endpoint `login` at login_p99s."""
    run = synthetic_run(path, _rows("a", P50), requests=True)
    for k, p99 in enumerate(login_p99s, 1):
        write_endpoints(
            trial_dir(run, "a", k),
            [
                _endpoint_row("work", 0, 2.0 + 0.01 * k),
                _endpoint_row("login", 1, p99, 300, validity=validity),
            ],
        )
    return run


LOGIN = [5.0, 5.1, 4.9, 5.05, 4.95]


def test_run_endpoints_is_one_row_per_cell_trial_and_endpoint(tmp_path):
    ep = results.load(_mixed_run(tmp_path / "r", LOGIN)).endpoints
    assert len(ep) == 10 and set(ep["endpoint"]) == {"work", "login"}
    assert list(ep.columns[:4]) == ["cell_id", "trial", "server", "rate"]


def test_compare_finds_a_regression_in_one_endpoint_the_whole_cell_hides(tmp_path, analysis):
    b = _mixed_run(tmp_path / "base", LOGIN)
    c = _mixed_run(tmp_path / "cand", [v * 1.5 for v in LOGIN])
    result = compare.compare_runs(b, c)
    whole, *per = result.cells
    assert whole.endpoint == "" and whole.verdict == "no significant change"
    by = {x.endpoint: x for x in per}
    assert by["login"].verdict == "slower" and by["work"].verdict != "slower"
    assert by["login"].metrics["p99"].change == pytest.approx(0.5)
    assert result.verdict == "regression"
    r = analysis("compare", b, c)
    assert r.code == 1 and "login" in r.output, r.output


def test_a_threshold_may_name_an_endpoint(tmp_path):
    run = _mixed_run(tmp_path / "r", LOGIN)
    ths = check.parse(
        [
            {"where": {"endpoint": "login"}, "p99_ms": {"lt": 6}},
            {"where": {"endpoint": "login"}, "p99_ms": {"lt": 4}},
            {"where": {"endpoint": "nope"}, "p99_ms": {"lt": 4}},
        ],
        "t.yaml",
        list(results.load(run).trials.columns),
    )
    ok, breach, missing = check.evaluate(results.load(run), ths)
    assert ok.passed and ok.measured == pytest.approx(5.0) and "endpoint=login" in ok.cell_label
    assert not breach.passed
    assert not missing.passed and "no endpoint 'nope'" in missing.note


def test_an_endpoint_with_too_few_requests_for_a_p99_cannot_pass_a_p99_gate(tmp_path):
    few = "too few requests for a p99 (300 answered, its 95% CI needs 368)"
    run = _mixed_run(tmp_path / "r", LOGIN, validity=few)
    cols = list(results.load(run).trials.columns)
    p99, rate = check.evaluate(
        results.load(run),
        check.parse(
            [
                {"where": {"endpoint": "login"}, "p99_ms": {"lt": 100}},
                {"where": {"endpoint": "login"}, "throughput_rps": {"gt": 1}},
            ],
            "t.yaml",
            cols,
        ),
    )
    assert not p99.passed and "too few requests" in p99.note
    assert rate.passed  # a count needs no p99


def test_an_endpoint_threshold_takes_endpoint_metrics_only(tmp_path):
    run = _mixed_run(tmp_path / "r", LOGIN)
    with pytest.raises(PerfctlError, match="not a per-endpoint metric"):
        check.parse(
            [{"where": {"endpoint": "login"}, "loop_lag_p99_ms": {"lt": 1}}],
            "t.yaml",
            list(results.load(run).trials.columns),
        )


def test_the_report_has_the_per_endpoint_table(tmp_path):
    run = _mixed_run(tmp_path / "r", LOGIN)
    html = report._endpoints(results.load(run))
    assert "Per endpoint" in html and "login" in html and "work" in html
    assert report._endpoints(results.load(synthetic_run(tmp_path / "one", _rows("a", P50)))) == ""
