"""Every case of the published reference vectors (/work/shared/reference/queueing-vectors.json,
vendored as tests/models/queueing-vectors.json) with the tolerance the file states."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from models import closed, queues, usl

SHARED = Path(
    os.environ.get("PERFCTL_QUEUEING_VECTORS", "/work/shared/reference/queueing-vectors.json")
)
VENDORED = Path(__file__).with_name("queueing-vectors.json")
VECTORS = json.loads((SHARED if SHARED.exists() else VENDORED).read_text())


def cases(section):
    return [pytest.param(c, id=f"{section}-{i}") for i, c in enumerate(VECTORS[section])]


def test_vendored_copy_matches_shared():
    if not SHARED.exists():
        pytest.skip("shared reference file not present; using the vendored copy")
    assert json.loads(SHARED.read_text()) == json.loads(VENDORED.read_text())


def test_every_section_is_covered():
    assert set(VECTORS) - {"about"} == {"mm1", "mmc", "mmck", "mg1", "mva_closed", "usl"}


@pytest.mark.parametrize("case", cases("mm1"))
def test_mm1(case):
    r = queues.mm1(case["arrival_rate"], case["service_rate"])
    tol = case["rel_tol"]
    for p, v in case.get("response_percentiles", {}).items():
        assert r.response_percentile(float(p)) == pytest.approx(v, rel=tol)
    for key in ("mean_queue_length", "utilization", "mean_response"):
        if key in case:
            assert getattr(r, key) == pytest.approx(case[key], rel=tol), key


@pytest.mark.parametrize("case", cases("mmc"))
def test_mmc(case):
    r = queues.mmc(case["arrival_rate"], case["service_rate"], case["servers"])
    names = {
        "mean_queue_length_waiting": "mean_queue_waiting",
        "mean_response": "mean_response",
        "p_wait": "p_wait",
        "mean_wait": "mean_wait",
    }
    checked = 0
    for key, attr in names.items():
        if key in case:
            assert getattr(r, attr) == pytest.approx(case[key], rel=case["rel_tol"]), key
            checked += 1
    assert checked == len(set(case) & set(names))


@pytest.mark.parametrize("case", cases("mmck"))
def test_mmck(case):
    r = queues.mmck(case["arrival_rate"], case["service_rate"], case["servers"], case["capacity"])
    keys = [k for k in ("p0", "mean_response", "p_block") if k in case]
    assert keys
    for key in keys:
        assert getattr(r, key) == pytest.approx(case[key], rel=case["rel_tol"]), key


@pytest.mark.parametrize("case", cases("mg1"))
def test_mg1(case):
    for sub in case["cases"]:
        r = queues.mg1(case["arrival_rate"], case["mean_service"], sub["service_scv"])
        assert r.mean_wait == pytest.approx(sub["mean_wait"], rel=case["rel_tol"])
        # Allen-Cunneen with one server and Poisson arrivals is exactly P-K
        g = queues.mgc(case["arrival_rate"], case["mean_service"], 1, sub["service_scv"])
        assert g.mean_wait == pytest.approx(sub["mean_wait"], rel=case["rel_tol"])


@pytest.mark.parametrize("case", cases("mva_closed"))
def test_mva_jain(case):
    top = max(e["users"] for e in case["expect"])
    r = closed.mva(case["demands"], top, case["think_time"])
    for e in case["expect"]:
        i = e["users"] - 1
        assert r.response_time[i] == pytest.approx(e["response"], abs=case["abs_tol"]), e
        assert r.throughput[i] == pytest.approx(e["throughput"], abs=case["abs_tol"]), e


@pytest.mark.parametrize("case", cases("usl"))
def test_usl(case):
    f = usl.fit(case["concurrency"], case["throughput"])
    tol = case["rel_tol"]
    assert f.sigma == pytest.approx(case["alpha_sigma"], rel=tol)
    assert f.kappa == pytest.approx(case["beta_kappa"], rel=tol)
    assert f.lam == pytest.approx(case["gamma_lambda"], rel=tol)
    if "peak_concurrency" in case:
        assert f.peak_concurrency == pytest.approx(case["peak_concurrency"], rel=tol)
