"""`load.records: none`: a run that keeps no request rows still gets its trial rows, timeline,
models, report, check and compare, all from the HdrHistograms and counts of its digests; and a
run that keeps every row gets the same answers from them (percentiles exact there, within 0.1%
here). `records: sample:F` keeps about that share of the rows."""

import json
import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from loadgen import hdr
from orchestrator import results
from orchestrator.analysis import histograms, queueing

from .conftest import perfctl_run

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

RECORDS = """
name: records-{records_name}
servers:
  py: {{impl: python, model: async}}
workload: {{path: /work, params: {{spin_us: 200}}}}
load: {{mode: closed, connections: "{{connections}}", duration: 1s, warmup: 300ms,
        records: "{records}"}}
matrix: {{connections: [1, 4]}}
repeats: 3
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
thresholds:
  - {{p99_ms: {{lt: 100000}}, throughput_rps: {{gt: 1}}}}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("records")
    return {
        name: perfctl_run(RECORDS.format(records=rec, records_name=name), tmp, name)
        for name, rec in (("none", "none"), ("sample", "sample:0.2"), ("all", "all"))
    }


def trial_dirs(run_dir):
    """Every trial directory of run_dir: one per row of its trials.csv (2 cells x 3 repeats),
    so a loop over them cannot pass by looping over nothing."""
    dirs = sorted(run_dir.glob("cells/*/trial-*"))
    rows = len(pd.read_csv(run_dir / "trials.csv"))
    assert rows == 6 and len(dirs) == rows, (run_dir, rows, dirs)
    return dirs


def test_no_rows_kept_but_every_trial_summarised(runs):
    run_dir = runs["none"]
    trials = results.load(run_dir).trials
    assert len(trials) == 6 and (trials["requests"] > 0).all()
    assert (trials["latency_percentiles_from"] == "hdr").all()
    for tdir in trial_dirs(run_dir):
        assert not (tdir / "requests.parquet").exists()
        assert (tdir / "digest.json").is_file() and (tdir / "latency.hlog").is_file()
        tl = pd.read_parquet(tdir / "timeline.parquet")
        assert tl["throughput_rps"].sum() > 0 and tl["latency_p99_ms"].notna().any()
    assert results.load(run_dir).requests.empty


def test_all_rows_give_exact_percentiles_and_the_histograms_agree(runs):
    run = results.load(runs["all"])
    assert len(run.trials) == 6 and (run.trials["latency_percentiles_from"] == "exact").all()
    for _, t in run.trials.iterrows():
        w = histograms.trial_window(run, t["cell_id"], t["trial"])
        for name, q in (("p50", 50.0), ("p99", 99.0)):
            exact = t[f"latency_{name}_ms"]
            assert exact <= hdr.percentile_ms(w.hists["latency"], q) <= exact * 1.001


def test_sample_keeps_about_its_share(runs):
    for tdir in trial_dirs(runs["sample"]):
        kept = pq.ParquetFile(tdir / "requests.parquet").metadata.num_rows
        total = json.loads((tdir / "digest.json").read_text())["rows"]
        assert abs(kept - 0.2 * total) <= 5 * np.sqrt(0.2 * total) + 1


def test_model_report_check_and_compare_run_without_rows(runs, analysis):
    none = runs["none"]
    r = analysis("model", none)
    assert r.code == 0, r.output
    doc = json.loads((none / "models.json").read_text())
    assert len(doc["cells"]) == 2
    for cell in doc["cells"]:
        assert cell["measured_mean_ms"] > 0 and cell["measured_p99_ms"] >= cell["measured_mean_ms"]
        assert cell["service_source"] == "server_timing" and cell["service_mean_ms"] > 0
    r = analysis("report", none)
    assert r.code == 0, r.output
    assert "Latency spectrum" in (none / "report.html").read_text()
    r = analysis("check", none, "--include-noisy")  # a busy test host makes trials noisy
    assert r.code in (0, 1) and "Thresholds" in r.output, r.output
    r = analysis("compare", runs["all"], none)
    assert r.code in (0, 3), r.output  # 3 trials a side: maybe inconclusive
    assert "no requests" not in r.output


def test_models_from_histograms_match_models_from_rows(runs):
    """The same run's rows, pulled one cell at a time, give the service estimate the
    histograms give (mean exact, spread within the histogram's resolution)."""
    from models.parameters import estimate_service

    run = results.load(runs["all"])
    dists = histograms.cell_distributions(run, run.trials)
    for cid, d in dists.items():
        rows = run.cell_requests(cid, measured_only=True)
        est = estimate_service(rows)
        got = histograms.service_from_histograms(d)
        assert got.mean_s == pytest.approx(est.mean_s, rel=1e-6)
        assert got.scv == pytest.approx(est.scv, rel=1e-3)
        assert got.overhead_mean_s == pytest.approx(est.overhead_mean_s, rel=1e-3, abs=1e-6)
        # the median: the rows' middle order statistic (rank ceil(n/2); np.median would
        # average two, which a gap in the distribution can put far from either)
        ok = rows[(rows["error"] == 0) & rows["svc_ms"].notna()]
        extra = np.sort(
            np.maximum(
                (
                    ok["latency_ns"] / 1e9
                    - ok["svc_ms"].astype(float) / 1e3
                    - ok["queue_ms"].fillna(0).astype(float) / 1e3
                ),
                0,
            )
        )
        middle = extra[math.ceil(extra.size / 2) - 1]
        assert middle - 1e-9 <= got.overhead_s <= middle * (1 + hdr.RELATIVE_ERROR) + 1e-9
        assert queueing.fit_run(runs["all"])[0]["cells"]


def test_dataset_scans_lazily_and_cell_requests_filter(runs):
    import pyarrow.dataset as ds

    run = results.load(runs["all"])
    data = run.dataset()
    cid = run.trials["cell_id"].iloc[0]
    n = data.count_rows(filter=ds.field("cell_id") == cid)
    assert n == len(run.cell_requests(cid)) > 0
    one = run.cell_requests(cid, trial=2, columns=["done_ns"], measured_only=True)
    assert set(one["trial"]) == {2} and "latency_ns" in one.columns
    assert len(one) == run.trials.set_index(["cell_id", "trial"]).loc[(cid, 2), "requests"]
    assert run.request_rows() == data.count_rows()
