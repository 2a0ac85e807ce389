"""Thresholds: parsing, evaluation, `perfctl check` exit codes and the pytest plugin."""

import os
import subprocess
import sys

import pytest

from orchestrator import results
from orchestrator.analysis import check
from orchestrator.errors import PerfctlError

from .conftest import ROOT, synthetic_run

ROWS = [
    {
        "cell_id": "aaa",
        "trial": 1,
        "server": "c-pool",
        "rate": 1000,
        "throughput_rps": 990.0,
        "latency_p99_ms": 3.0,
        "error_rate": 0.0,
        "valid": True,
        "invalid_reasons": "",
    },
    {
        "cell_id": "aaa",
        "trial": 2,
        "server": "c-pool",
        "rate": 1000,
        "throughput_rps": 1010.0,
        "latency_p99_ms": 5.0,
        "error_rate": 0.0,
        "valid": True,
        "invalid_reasons": "",
    },
    {
        "cell_id": "aaa",
        "trial": 3,
        "server": "c-pool",
        "rate": 1000,
        "throughput_rps": 10.0,
        "latency_p99_ms": 900.0,
        "error_rate": 0.5,
        "valid": False,
        "invalid_reasons": "lag",
    },
    {
        "cell_id": "bbb",
        "trial": 1,
        "server": "py",
        "rate": 1000,
        "throughput_rps": 400.0,
        "latency_p99_ms": 30.0,
        "error_rate": 0.01,
        "valid": True,
        "invalid_reasons": "",
    },
]


@pytest.fixture
def run_dir(tmp_path):
    return synthetic_run(
        tmp_path / "run",
        ROWS,
        [
            {"where": {"server": "c-pool"}, "p99_ms": {"lt": 5}, "throughput_rps": {"ge": 1000}},
            {"error_rate": {"lt": 0.05}},
        ],
    )


def test_mean_over_valid_trials_and_aliases(run_dir):
    verdicts = check.check_run(run_dir)
    got = {(v.threshold.text, v.cell_id): (v.measured, v.passed) for v in verdicts}
    # c-pool: valid trials 1 and 2 only -> p99 mean 4.0, throughput mean 1000
    assert got[("p99_ms < 5", "aaa")] == (4.0, True)
    assert got[("throughput_rps >= 1000", "aaa")] == (1000.0, True)
    assert got[("error_rate < 0.05", "aaa")] == (0.0, True)
    assert got[("error_rate < 0.05", "bbb")] == (0.01, True)
    assert len(verdicts) == 4


@pytest.mark.parametrize(
    "op,limit,passed",
    [
        ("lt", 4.0, False),
        ("le", 4.0, True),
        ("gt", 4.0, False),
        ("ge", 4.0, True),
        ("gt", 3.9, True),
    ],
)
def test_operators(tmp_path, op, limit, passed):
    d = synthetic_run(
        tmp_path / "r", ROWS, [{"where": {"server": "c-pool"}, "p99_ms": {op: limit}}]
    )
    [v] = check.check_run(d)
    assert v.passed is passed


def test_missing_data_is_a_breach(tmp_path):
    rows = [dict(ROWS[2])]  # only an invalid trial
    d = synthetic_run(
        tmp_path / "r",
        rows,
        [{"p99_ms": {"lt": 5000}}, {"where": {"server": "nope"}, "p99_ms": {"lt": 1}}],
    )
    v1, v2 = check.check_run(d)
    assert not v1.passed and v1.note == "no valid trial"
    assert not v2.passed and v2.note == "matches no cell"


@pytest.mark.parametrize(
    "entry,needle",
    [
        ({"p98_ms": {"lt": 5}}, "unknown metric 'p98_ms'"),
        ({"p99_ms": {"below": 5}}, "unknown operator 'below'"),
        ({"where": {"colour": "red"}, "p99_ms": {"lt": 5}}, "'colour'"),
        ({"p99_ms": {"lt": "fast"}}, "not a number"),
        ({"where": {"server": "py"}}, "no metric"),
    ],
)
def test_bad_thresholds_raise(tmp_path, entry, needle):
    d = synthetic_run(tmp_path / "r", ROWS, [entry])
    with pytest.raises(PerfctlError, match="thresholds\\[1\\]") as e:
        check.thresholds_for(results.load(d))
    assert needle in str(e.value)


def test_check_command_exit_codes(run_dir, tmp_path, analysis):
    r = analysis("check", run_dir)
    assert r.code == 0, r.output
    assert "pass" in r.output and "c-pool" in r.output
    breach = tmp_path / "strict.yaml"
    breach.write_text("thresholds:\n  - {where: {server: py}, p99_ms: {lt: 10}}\n")
    r = analysis("check", run_dir, "--thresholds", breach)
    assert r.code == 1, r.output
    assert "BREACH" in r.output and "30" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {p98_ms: {lt: 10}}\n")
    r = analysis("check", run_dir, "--thresholds", bad)
    assert r.code == 2 and "p98_ms" in r.output and "bad.yaml" in r.output


def test_check_without_thresholds_is_an_error(tmp_path, analysis):
    d = synthetic_run(tmp_path / "r", ROWS, [])
    r = analysis("check", d)
    assert r.code == 2 and "thresholds" in r.output


def _pytest(args, cwd):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",  # plugin loads via its entry point
            "-p",
            "no:cacheprovider",
            "-v",
            *map(str, args),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_pytest_plugin_one_case_per_threshold_and_cell(run_dir, tmp_path):
    work = tmp_path / "ci"
    work.mkdir()
    p = _pytest(["--perf-run", run_dir], work)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "4 passed" in p.stdout
    assert "threshold-1[p99_ms<5 | server=c-pool, rate=1000] PASSED" in p.stdout
    assert "threshold-2[error_rate<0.05 | server=py, rate=1000] PASSED" in p.stdout
    strict = tmp_path / "strict.yaml"
    strict.write_text("- {p99_ms: {lt: 10}}\n")
    p = _pytest(["--perf-run", run_dir, "--perf-thresholds", strict], work)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 failed, 1 passed" in p.stdout
    assert (
        "threshold breached: server=py, rate=1000: latency_p99_ms = 30, needs p99_ms < 10"
        in p.stdout
    )


@pytest.fixture
def run_under_root():
    """A synthetic run inside the project (results/...), given as a relative path as the manual
    does: then pytest's rootdir is the project and its `testpaths` apply."""
    import shutil

    d = ROOT / "results" / f".gate-test-{os.getpid()}"
    shutil.rmtree(d, ignore_errors=True)
    synthetic_run(
        d,
        ROWS,
        [
            {"where": {"server": "c-pool"}, "p99_ms": {"lt": 5}, "throughput_rps": {"ge": 1000}},
            {"error_rate": {"lt": 0.05}},
        ],
    )
    yield d.relative_to(ROOT)
    shutil.rmtree(d, ignore_errors=True)


def test_pytest_gate_from_the_project_root_runs_only_the_threshold_cases(run_under_root):
    """docs/comparing.md: `pytest --perf-run results/latest`, typed in the project root, where pytest's
    testpaths would otherwise collect the whole suite (and fail on its relative imports)."""
    p = _pytest(["--perf-run", run_under_root], ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"rootdir: {ROOT}" in p.stdout, p.stdout
    assert "4 passed" in p.stdout and "ERROR" not in p.stdout and " error" not in p.stdout
    assert "tests/" not in p.stdout, p.stdout
    # naming a test path runs it beside the threshold cases
    p = _pytest(["--perf-run", run_under_root, "tests/results/test_schema.py"], ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "test_schema.py::" in p.stdout and "threshold-1[" in p.stdout
    assert "passed" in p.stdout and " 4 passed" not in p.stdout


def test_pytest_plugin_bad_threshold_is_a_usage_error(tmp_path):
    d = synthetic_run(tmp_path / "r", ROWS, [{"p98_ms": {"lt": 1}}])
    p = _pytest(["--perf-run", d], tmp_path)
    assert p.returncode == 4, p.stdout + p.stderr
    assert "p98_ms" in p.stdout + p.stderr


def test_plugin_is_inert_without_perf_run(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    p = _pytest([], tmp_path)
    assert p.returncode == 0 and "1 passed" in p.stdout


def test_check_uses_valid_quiet_trials_and_says_how_many(tmp_path, analysis):
    """A trial the host disturbed (p99 x10 next to a busy neighbour) no longer breaks the
    gate; the table says it was left out. --include-noisy counts it again."""
    rows = [dict(r, quiet=True, noise_reasons="") for r in ROWS[:2]]
    rows.append(
        dict(
            ROWS[1],
            trial=4,
            latency_p99_ms=50.0,
            quiet=False,
            noise_reasons="other processes used 60% of a CPU on CPUs 0,1 (> 10%)",
        )
    )
    d = synthetic_run(tmp_path / "r", rows, [{"p99_ms": {"lt": 5}}])
    [v] = check.check_run(d)
    assert v.passed and v.measured == 4.0 and v.trials == 2 and v.excluded == 1
    r = analysis("check", d)
    assert r.code == 0 and "2 (1 left out)" in r.output and "valid, quiet" in r.output, r.output
    [v] = check.check_run(d, include_noisy=True)
    assert not v.passed and v.trials == 3
    assert analysis("check", d, "--include-noisy").code == 1


def test_a_cell_whose_trials_are_all_noisy_is_a_breach_that_says_so(tmp_path):
    rows = [dict(ROWS[0], quiet=False, noise_reasons="CPU steal 9.0% > 2%")]
    d = synthetic_run(tmp_path / "r", rows, [{"p99_ms": {"lt": 5}}])
    [v] = check.check_run(d)
    assert not v.passed and v.note == "no usable trial (0 invalid, 1 noisy)"


def test_check_says_per_cell_how_many_trials_it_used_and_why_it_dropped_the_others(
    tmp_path, analysis
):
    rows = [dict(r, quiet=True, noise_reasons="") for r in ROWS[:2]]
    late = (
        "send lateness (p99 3.10 ms) moved the p50 latency by up to 9.0% (0.1 of 1.2 ms), more "
        "than its precision of 2.0% (its 95% interval, at least 2%): the load generator fell "
        "behind its schedule. Fix: pin the load generator"
    )
    rows += [
        dict(ROWS[1], trial=k, latency_p99_ms=50.0, valid=False, invalid_reasons=late)
        for k in (4, 5)
    ]
    d = synthetic_run(tmp_path / "r", rows, [{"p99_ms": {"lt": 5}}])
    [v] = check.check_run(d)
    assert v.passed and v.trials == 2 and v.excluded == 2
    assert v.usage == "2 of 4 trials used; 2 invalid (trials 4, 5): send lateness x2"
    r = analysis("check", d)
    assert r.code == 0 and "2 of 4 trials used; 2 invalid (trials 4, 5): send lateness x2" in (
        r.output
    ), r.output
