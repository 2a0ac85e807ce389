"""`perfctl model` and analysis.queueing.fit_run on a real small run."""

import json
import math

import pytest

from orchestrator import results
from orchestrator.analysis import queueing, views

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]


def test_model_command_writes_models_json_and_figures(small_run, analysis):
    r = analysis("model", small_run)
    assert r.code == 0, r.output
    assert "Models vs measurements" in r.output
    assert "MVA" in r.output and "M/" in r.output  # closed and open cells both modelled
    assert "USL" in r.output and "peak" in r.output  # 4 concurrency levels
    doc = json.loads((small_run / "models.json").read_text())
    trials = results.load(small_run).trials
    assert {c["cell_id"] for c in doc["cells"]} == set(trials["cell_id"])
    for c in doc["cells"]:
        assert c["measured_mean_ms"] > 0
        assert "model" in c
    [fit] = doc["usl"]
    assert fit["lam"] > 0 and fit["sigma"] >= 0 and fit["kappa"] >= 0
    for name in ("model_latency", "usl"):
        for ext in ("png", "svg"):
            assert (small_run / "plots" / f"{name}.{ext}").stat().st_size > 1000


def test_fit_run_returns_what_it_wrote(small_run):
    doc = queueing.fit_run(small_run)[0]
    assert doc == json.loads((small_run / "models.json").read_text())
    closed = [c for c in doc["cells"] if c.get("load_mode") == "closed"]
    assert len(closed) == 4 and all(c.get("pred_mean_ms", 0) > 0 for c in closed)
    assert all(math.isfinite(c["err_mean"]) for c in closed)


def test_measured_requests_drop_the_warmup(small_run):
    run = results.load(small_run)
    kept = views.measured_requests(run, ok_only=False)
    assert 0 < len(kept) < len(run.requests)
    per_trial = kept.groupby(["cell_id", "trial"]).size()
    for (cid, k), n in per_trial.items():
        row = run.trials[(run.trials["cell_id"] == cid) & (run.trials["trial"] == k)].iloc[0]
        assert n == row["requests"]  # the trial row counts the same window


def test_model_on_a_non_run_is_an_error(tmp_path, analysis):
    r = analysis("model", tmp_path)
    assert r.code == 2 and "run.json" in r.output


def test_the_figures_service_estimate_keeps_the_database_time_the_table_used():
    """model_figures draws curves from service_of(table row): with db_mean_ms in the row the
    estimate has the database's part, so a /db cell's curve is the tandem its row predicted."""
    import math

    import pandas as pd

    from orchestrator.analysis.queueing import service_of

    row = pd.Series(
        {
            "service_mean_ms": 2.0,
            "service_scv": 1.0,
            "service_source": "server_timing",
            "overhead_ms": 0.1,
            "db_mean_ms": 1.5,
        }
    )
    s = service_of(row)
    assert s.has_db and math.isclose(s.db_mean_s, 0.0015) and math.isclose(s.db_share, 0.75)
    assert not service_of(row.drop("db_mean_ms")).has_db
    assert not service_of(pd.Series({**row, "db_mean_ms": float("nan")})).has_db
