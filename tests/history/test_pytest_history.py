"""`pytest --perf-history EXPERIMENT` (orchestrator/analysis/pytest_plugin.py): one case per
series of the history, failing on a regression, skipping when the evidence is thin, passing
otherwise; a missing store is a usage error."""

import subprocess
import sys
from pathlib import Path

from history_kit import levels, record

from orchestrator.history.store import Location, Store

ROOT = Path(__file__).resolve().parents[2]


def _pytest(args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_each_series_is_a_case_failing_on_a_regression_skipping_when_thin(tmp_path):
    store = Location(str(tmp_path / "h.sqlite"), "test")
    cells = {
        "slower": levels(30, step_at=22, step=-0.10, seed=1),
        "flat": levels(30, seed=2),
        "young": levels(4, seed=3),
    }
    with Store(store) as st:
        for cell, runs in cells.items():
            for k, values in enumerate(runs):
                st.add(record(k, list(values), cell=cell))
    p = _pytest(["--perf-history", "kit", "--perf-history-store", store.target], tmp_path)
    out = p.stdout
    assert p.returncode == 1, out + p.stderr
    assert "history[throughput | cell=slower] FAILED" in out
    assert "history[throughput | cell=flat] PASSED" in out
    assert "history[throughput | cell=young] SKIPPED" in out
    assert "regression in the history: experiment kit, cell cell=slower" in out


def test_a_missing_store_is_a_usage_error(tmp_path):
    p = _pytest(["--perf-history", "kit", "--perf-history-store", tmp_path / "no.sqlite"], tmp_path)
    assert p.returncode == 4, p.stdout + p.stderr
    assert "--perf-history:" in p.stderr and "does not exist" in p.stderr
