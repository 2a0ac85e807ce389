"""Fuzzing the readers of a run directory (results.load, report, check, compare): one file of a
real run (run.json, trials.csv, trials.parquet, and one trial's requests.parquet, digest.json,
latency.hlog, summary.json, timeline.parquet, endpoints.csv) truncated, overwritten in places, or replaced.

Allowed: the command works, or PerfctlError naming the damaged file; never another exception.
And the rest of the run still loads: the trials table whenever one of its two files reads, the
configuration whenever run.json reads, the requests and timeline always (a damaged trial file
is left out, and the report says so).

Budgets (fixed, derandomized): LOAD_EXAMPLES damaged copies through results.load, check and
compare; REPORT_EXAMPLES through the report (seconds each: figures drawn, models fitted).
Found and fixed: a truncated or overwritten run.json, trials.parquet, summary.json or
timeline.parquet made `perfctl report` (and check, compare, model for the first two) end in a
traceback; a damaged trials.csv beside a damaged parquet file too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_kit import perfctl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator import results
from orchestrator.analysis import report
from orchestrator.analysis.check import check_run
from orchestrator.api.compare_runs import compare
from orchestrator.errors import PerfctlError

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

ROOT = Path(__file__).resolve().parents[2]
LOAD_EXAMPLES = 60
REPORT_EXAMPLES = 6
EXPERIMENT = """
name: fuzz-results
servers: {c: {impl: c, model: pool, threads: 2}}
workload: {path: /work, params: {spin_us: 100}}
load: {mode: "{mode}", connections: 2, rate: 200, duration: 1s, warmup: 200ms}
matrix: {mode: [closed, open]}
repeats: 2
thresholds:
  - {p99_ms: {lt: 100000}, error_rate: {le: 1}}
"""
RUN_FILES = ["run.json", "trials.csv", "trials.parquet"]
TRIAL_FILES = [
    "requests.parquet",
    "digest.json",
    "latency.hlog",
    "summary.json",
    "timeline.parquet",
    "endpoints.csv",
]
FUZZ = settings(
    max_examples=LOAD_EXAMPLES,
    deadline=None,  # real files and figures: how long is the host's business, not the test's
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, perfctl_env_module) -> Path:
    """A small real run: two cells (closed, open), two trials each, every file kept."""
    tmp = tmp_path_factory.mktemp("fuzz-results")
    exp = tmp / "exp.yaml"
    exp.write_text(EXPERIMENT)
    out = tmp / "run"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(exp), "--out", str(out)]
        + ["--no-plots"],
        cwd=ROOT,
        env=perfctl_env_module,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def perfctl_env_module():
    import os  # the session's environment, as the perfctl_env fixture gives a test

    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160"}


damage = st.tuples(
    st.sampled_from(RUN_FILES + TRIAL_FILES),
    st.sampled_from(["truncate", "overwrite", "replace", "empty"]),
    st.floats(0, 1),
    st.binary(min_size=1, max_size=64),
)


def damaged_copy(pristine: Path, dest: Path, how) -> Path:
    """A copy of the run with one file damaged; returns that file's path."""
    name, op, where, junk = how
    shutil.copytree(pristine, dest)
    if name in RUN_FILES:
        f = dest / name
    else:
        f = sorted(dest.glob(f"cells/*/trial-1/{name}"))[0]
    data = f.read_bytes()
    at = int(where * len(data))
    if op == "truncate":
        data = data[:at]
    elif op == "overwrite":
        data = data[:at] + junk + data[at + len(junk) :]
    elif op == "replace":
        data = junk
    else:
        data = b""
    f.write_bytes(data)
    return f


def allowed(e: PerfctlError, f: Path, run: Path) -> None:
    """A PerfctlError is allowed when it names the damaged file."""
    msg = str(e)
    assert str(f) in msg or str(f.relative_to(run)) in msg or f.name in msg, (f, msg)
    assert "Traceback" not in msg


@FUZZ
@given(how=damage)
def test_a_damaged_file_leaves_the_rest_of_the_run_readable(pristine, tmp_path_factory, how):
    run_dir = tmp_path_factory.mktemp("d") / "run"
    f = damaged_copy(pristine, run_dir, how)
    run = results.load(run_dir)
    trials = run.trials  # one of its two files reads: the table reads
    assert len(trials) == 4 and set(trials["trial"]) == {1, 2}
    try:
        info = run.info
        assert isinstance(info, dict)
    except PerfctlError as e:
        assert f.name == "run.json", e
        allowed(e, f, run_dir)
    # a damaged trial file is left out; every other trial's rows still come
    assert set(run.requests["cell_id"]) == set(trials["cell_id"])
    assert not run.timeline.empty
    if f.name != "run.json":  # the endpoints table carries the axes run.json names
        assert set(run.endpoints["cell_id"]) <= set(trials["cell_id"])
    damaged = run.damaged()
    if f.name in TRIAL_FILES and f.suffix != ".hlog" and how[1] in ("empty", "replace"):
        assert any(str(f.relative_to(run_dir)) in line for line in damaged), damaged
    for call in (lambda: check_run(run_dir), lambda: compare(pristine, run_dir)):
        try:
            call()
        except PerfctlError as e:
            allowed(e, f, run_dir)


@settings(FUZZ, max_examples=REPORT_EXAMPLES)
@given(how=damage)
def test_the_report_of_a_damaged_run_is_written_or_names_the_file(pristine, tmp_path_factory, how):
    run_dir = tmp_path_factory.mktemp("r") / "run"
    f = damaged_copy(pristine, run_dir, how)
    notes: list[str] = []
    try:
        page = report.build(run_dir, None, notes)
    except PerfctlError as e:
        allowed(e, f, run_dir)
        return
    assert page.is_file() and "<html" in page.read_text()


@pytest.mark.parametrize("name", ["run.json", "requests.parquet"])
def test_perfctl_report_on_a_truncated_file_exits_cleanly(pristine, tmp_path, perfctl_env, name):
    """The issue's two cases through the CLI: a truncated run.json ends in exit 2 naming it; a
    truncated requests.parquet leaves that trial's rows out, says so, and writes the report."""
    run_dir = tmp_path / "run"
    f = damaged_copy(pristine, run_dir, (name, "truncate", 0.5, b"x"))
    done = perfctl("report", str(run_dir), env=perfctl_env, timeout=300)
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    if name == "run.json":
        assert done.returncode == 2 and str(f) in out and "damaged" in out, out
    else:
        assert done.returncode == 0, out
        rel = str(f.relative_to(run_dir))
        assert f"skipped: {rel} is damaged" in " ".join(out.split()), out


def test_an_undamaged_run_names_no_file_as_damaged(pristine):
    """A run nothing touched is not damaged: every healthy `perfctl run` printed six "skipped:
    ... endpoints.csv is damaged" lines while the check tested a DataFrame's truth value."""
    assert sorted(pristine.glob("cells/*/trial-*/endpoints.csv"))  # the file the bug misread
    assert results.load(pristine).damaged() == []
