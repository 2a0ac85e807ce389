"""A results directory written by perfctl before the layout change (fixtures/run-before-layout,
made by commit 46628bb) still loads with today's column names, and `perfctl report` and
`perfctl model` still work on it."""

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator import results
from orchestrator.cli import app
from orchestrator.results import schema

FIXTURE = Path(__file__).parent / "fixtures" / "run-before-layout"


@pytest.fixture
def old_run(tmp_path):
    return Path(shutil.copytree(FIXTURE, tmp_path / "run"))


def test_old_columns_load_under_their_new_names(old_run):
    trials = results.load(old_run).trials
    for old, new in schema.RENAMED_COLUMNS.items():
        assert new in trials.columns and old not in trials.columns, (old, new)
    assert set(trials["concurrency_model"]) == {"async"}
    assert (trials["window_s"] == 1.0).all()
    assert (trials["sent_to_done_mean_ms"] > 0).all()


def test_old_csv_alone_loads_too(old_run):
    (old_run / "trials.parquet").unlink()
    trials = results.load(old_run).trials
    assert "window_s" in trials.columns and len(trials) == 2


def test_old_requests_and_timeline_load(old_run):
    run = results.load(old_run)
    assert len(run.requests) > 100 and "latency_ns" in run.requests.columns
    assert not run.timeline.empty
    assert run.endpoints.empty and "endpoint" in run.endpoints.columns  # before endpoints.csv


def test_report_and_model_work_on_an_old_run(old_run):
    runner = CliRunner()
    r = runner.invoke(app, ["report", str(old_run)])
    assert r.exit_code == 0, r.output
    assert "before-layout" in (old_run / "report.html").read_text()
    r = runner.invoke(app, ["model", str(old_run), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert (old_run / "models.json").is_file()
