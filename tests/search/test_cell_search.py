"""One cell's search, driven by a simulated M/M/4 server (tests/search/search_sim.py) instead of
trials: the order of its probes, what each outcome means (retries, upper bounds, the errors
that stop a run), and its capacity.json entry."""

from __future__ import annotations

import dataclasses
import math

import pytest
from search_sim import OVERHEAD_S, MMc, run_search

from models.stations import Station, rate_for_slo
from orchestrator.experiment import compile_document
from orchestrator.measure.stationarity import Trend
from orchestrator.search.capacity_entry import cell_entry
from orchestrator.search.cell_search import CellSearch

DOC = {
    "name": "sim",
    "servers": {"mmc": {"cmd": "mmc --port {port}", "threads": 4}},
    "load": {"mode": "open", "connections": 64, "duration": "5s", "warmup": "1s"},
    "search": {"slo": {"p99": "30ms"}, "max_trials": 8},
}
EXACT_RPS = rate_for_slo(Station("shared_queue", 4, 0.004, overhead_s=OVERHEAD_S), "p99", 0.030)


def cell_search(**search) -> CellSearch:
    doc = {**DOC, "search": {**DOC["search"], **search}}
    plan = compile_document(doc, "sim.yaml")
    return CellSearch(plan.cells[0], plan.experiment.search, "sim.yaml")


def test_the_search_finds_a_simulated_mmc_capacity_with_an_interval_around_it():
    s = cell_search()
    specs = run_search(s, MMc(seed=3))
    assert [p.role for p in specs[:2]] == ["service", "saturation"]
    assert all(p.role == "knee" for p in specs[2:]) and len(specs) <= 8
    r = cell_entry(s, wall_s=0.0)
    assert r["status"] == "found" and r["unit"] == "rate_rps"
    # 5-s windows put the median trial's p99 below the long-run one: the capacity so defined
    # is ~3% above the closed form (README: the capacity search); the interval holds both
    assert r["low"] <= EXACT_RPS <= r["high"], r
    assert abs(r["capacity"] / EXACT_RPS - 1) < 0.06
    assert r["model"]["name"] == "M/M/4" and r["model"]["servers"] == 4
    knee = [p for p in r["probes"] if p["role"] == "knee"]
    assert all(p["used"] and p["verdict"] == "estimate" for p in knee)
    assert all(math.isfinite(p["capacity_estimate"]) for p in knee)
    # the probes bracket the answer: the first at the model's, later ones on both sides
    levels = [p["level"] for p in knee]
    assert min(levels) < r["capacity"] < max(levels)


def test_the_search_stops_once_the_interval_is_as_narrow_as_asked():
    s = cell_search(precision="20%", max_trials=12)
    specs = run_search(s, MMc(seed=5))
    r = cell_entry(s, 0.0)
    assert r["precision_reached"] and r["half_width_pct"] <= 20
    assert len(specs) < 12 and "precision reached" in r["stopped"]


def test_each_probe_row_gets_the_search_and_stationarity_columns():
    s = cell_search(max_trials=5)
    sim = MMc(seed=2)
    run_search(s, sim)
    row = sim.rows[-1]
    assert row["search_role"] == "knee" and row["search_used"] is True
    assert row["search_verdict"] == "estimate"
    assert row["search_level"] > 0 and row["search_latency_ms"] == row["latency_p99_ms"]
    for col in ("stationary", "stationarity_p", "stationarity_drift_pct", "stationarity_seconds"):
        assert col in row
    assert row["stationarity_seconds"] == 5


def test_a_noisy_probe_is_retried_once_at_the_same_level_then_named_and_left_out():
    def noisy(k, spec, row, readings):
        if k in (3, 4):  # the first knee probe and its retry
            row = {**row, "quiet": False, "noise_reasons": "other processes used 80% of a CPU"}
        return row, readings

    s = cell_search()
    specs = run_search(s, MMc(seed=4), noisy)
    assert specs[3].level == specs[2].level and specs[3].attempt == 2
    r = cell_entry(s, 0.0)
    first, retry = r["probes"][2], r["probes"][3]
    assert first["verdict"].startswith("retried: noisy") and not first["used"]
    assert retry["verdict"].startswith("not used (failed twice): noisy") and not retry["used"]
    assert r["knee_probes"] == len(specs) - 4  # neither counted in the estimate


def test_a_probe_with_a_trend_is_not_used_until_its_retry_is_steady():
    def drifting(k, spec, row, readings):
        if k == 3:
            readings = dataclasses.replace(readings, trend=Trend(5, 0.017, -0.5, False))
        return row, readings

    s = cell_search(max_trials=6)
    run_search(s, MMc(seed=6), drifting)
    r = cell_entry(s, 0.0)
    assert r["probes"][2]["verdict"].startswith("retried: per-second p99 fell 50%")
    assert r["probes"][3]["attempt"] == 2 and r["probes"][3]["used"]


def test_an_overloaded_or_failing_probe_is_an_upper_bound_not_a_retry():
    def overloaded(k, spec, row, readings):
        if k == 3:
            readings = dataclasses.replace(
                readings, stat_ms=400.0, trend=Trend(5, 0.017, 3.0, False)
            )
        if k == 4:
            row = {**row, "error_rate": 0.05}
        return row, readings

    s = cell_search(max_trials=7)
    specs = run_search(s, MMc(seed=7), overloaded)
    r = cell_entry(s, 0.0)
    assert r["probes"][2]["verdict"].startswith("upper bound: overloaded")
    assert r["probes"][3]["verdict"] == "upper bound: errors above the SLO's"
    assert r["upper_bound"] == min(specs[2].level, specs[3].level)
    assert all(p.level < r["upper_bound"] for p in specs[4:])
    assert r["high"] <= r["upper_bound"]


@pytest.mark.parametrize("best_second_ms", [45.0, 20.0])
def test_a_probe_not_steady_is_an_upper_bound_only_when_every_second_missed_the_slo(
    best_second_ms,
):
    # a falling p99 far above the 30 ms SLO: retried when some second met the SLO (a server
    # warming up may meet it once warm), an upper bound at once when none did
    def draining(k, spec, row, readings):
        if k == 3:
            readings = dataclasses.replace(
                readings,
                stat_ms=130.0,
                best_second_ms=best_second_ms,
                trend=Trend(5, 0.003, -2.9, False),
            )
        return row, readings

    s = cell_search(max_trials=6)
    specs = run_search(s, MMc(seed=7), draining)
    r = cell_entry(s, 0.0)
    verdict = r["probes"][2]["verdict"]
    if best_second_ms > 30.0:
        assert verdict == (
            "upper bound: not one second of the window met the SLO (the best second's p99 "
            "was 45 ms)"
        )
        assert r["probes"][2]["used"] and r["upper_bound"] == specs[2].level
        assert specs[3].attempt == 1 and specs[3].level < specs[2].level
    else:
        assert verdict.startswith("retried: per-second p99 fell")
        assert specs[3].attempt == 2 and specs[3].level == specs[2].level


def test_an_slo_no_load_can_meet_stops_the_run_naming_the_key():
    s = cell_search(slo={"p99": "5ms"})  # one request alone: p99 of Exp(4 ms) is 18 ms
    specs = run_search(s, MMc(seed=1))
    assert len(specs) == 1 and s.failure is not None
    text = str(s.failure)
    assert "key `search.slo.p99`" in text and "no load can meet the SLO" in text
    assert "Fix:" in text and s.failure.exit_code == 2


def test_the_load_generators_limit_is_never_reported_as_the_servers_capacity():
    def behind(k, spec, row, readings):
        if spec.role == "knee":
            row = {
                **row,
                "valid": False,
                "invalid_reasons": "send lateness p99 4.1 ms > 1.00 ms: the load generator "
                "fell behind its schedule",
                "send_lateness_p99_ms": 4.1,
            }
        return row, readings

    s = cell_search()
    specs = run_search(s, MMc(seed=1), behind)
    assert [p.role for p in specs] == ["service", "saturation", "knee", "knee"]
    text = str(s.failure)
    assert "key `search`" in text and "load generator could not drive" in text
    assert "load.processes" in text and s.failure.exit_code == 2
    r = cell_entry(s, 0.0)
    assert r["status"] == "failed" and math.isnan(r["capacity"])


def test_on_a_noisy_host_a_late_load_generator_is_noise_not_its_limit():
    def behind_noisy(k, spec, row, readings):
        if spec.role == "knee" and k < 5:
            row = {
                **row,
                "valid": False,
                "quiet": False,
                "invalid_reasons": "send lateness p99 4.1 ms > 1.00 ms: the load generator "
                "fell behind its schedule",
                "noise_reasons": "load generator waited 400 ms/s for its own CPU",
            }
        return row, readings

    s = cell_search()
    run_search(s, MMc(seed=1), behind_noisy)
    assert s.failure is None
    assert cell_entry(s, 0.0)["probes"][3]["verdict"].startswith("not used (failed twice)")


def test_a_closed_load_search_finds_users():
    doc = {
        **DOC,
        "load": {"mode": "closed", "think_time": "20ms", "duration": "5s", "warmup": "1s"},
        "search": {"slo": {"mean": "10ms"}, "max_trials": 6},
    }
    plan = compile_document(doc, "sim.yaml")
    s = CellSearch(plan.cells[0], plan.experiment.search, "sim.yaml")
    assert s.unit == "users"
    spec = s.next_spec()
    assert (spec.role, spec.level) == ("service", 1)
    cell = s.probe_cell(spec)
    assert cell.load.mode == "closed" and cell.load.connections == 1
    assert cell.load.think_time_s == 0.0 and cell.cell_id == plan.cells[0].cell_id
    knee = s.probe_cell(dataclasses.replace(spec, role="knee", level=7))
    assert knee.load.connections == 7 and knee.load.think_time_s == 0.02


@pytest.mark.parametrize("role", ["service", "saturation"])
def test_set_up_probes_are_closed_loop_and_keep_the_cell_id(role):
    s = cell_search()
    plan_cell = s.cell
    spec = dataclasses.replace(s.next_spec(), role=role, level=16)
    cell = s.probe_cell(spec)
    assert cell.load.mode == "closed" and cell.load.connections == 16
    assert cell.cell_id == plan_cell.cell_id and cell.load.rate_rps is None


def test_with_include_noisy_a_noisy_probe_counts_and_says_so():
    def noisy(k, spec, row, readings):
        return {**row, "quiet": False, "noise_reasons": "other processes used 80%"}, readings

    s = cell_search(include_noisy=True, max_trials=5)
    specs = run_search(s, MMc(seed=4), noisy)
    r = cell_entry(s, 0.0)
    assert all(p.attempt == 1 for p in specs)  # nothing retried
    knee = [p for p in r["probes"] if p["role"] == "knee"]
    assert all(p["used"] and "include_noisy" in p["verdict"] for p in knee)
    assert r["knee_probes"] == 3


def test_a_noisy_single_user_probe_never_rules_the_slo_out():
    def slow_and_noisy(k, spec, row, readings):
        row = {**row, "quiet": False, "noise_reasons": "other processes used 180%"}
        return row, dataclasses.replace(readings, stat_ms=35.0)

    s = cell_search(include_noisy=True)
    specs = run_search(s, MMc(seed=1), slow_and_noisy)
    assert [p.attempt for p in specs] == [1, 2] and s.failure is None
    r = cell_entry(s, 0.0)
    assert r["status"] == "failed" and "failed twice" in r["stopped"]


def test_rate_auto_adds_a_curve_after_the_search_crowded_around_the_knee():
    doc = {**DOC, "matrix": {"rate": {"auto": 9}}, "search": {**DOC["search"], "max_trials": 6}}
    plan = compile_document(doc, "sim.yaml")
    assert plan.curve_points == 9 and plan.search_trials() == (13, 15)
    s = CellSearch(plan.cells[0], plan.experiment.search, "sim.yaml", curve_points=9)
    specs = run_search(s, MMc(seed=2))
    roles = [p.role for p in specs]
    assert roles[:6].count("curve") == 0 and roles[6:] == ["curve"] * (len(specs) - 6)
    levels = [p.level for p in specs if p.role == "curve"]
    assert len(levels) == 9 and levels == sorted(levels)
    cap = cell_entry(s, 0.0)["capacity"]
    near = [x for x in levels if abs(x / cap - 1) <= 0.15]
    assert len(near) >= 4 and min(levels) < 0.5 * cap  # dense at the knee, and the low end
    cell = s.probe_cell(specs[-1])
    assert cell.load.mode == "open" and cell.load.rate_rps == levels[-1]
    r = cell_entry(s, 0.0)
    assert r["curve_trials"] == 9 and r["knee_probes"] == 4  # curve points are not estimates
    assert all(p["verdict"].startswith("curve point") for p in r["probes"] if p["role"] == "curve")


def test_the_readme_worked_example_is_what_the_search_computes():
    s = cell_search()
    run_search(s, MMc(seed=3))
    r = cell_entry(s, 0.0)
    knee = [(p["level"], round(p["latency_ms"], 2)) for p in r["probes"] if p["role"] == "knee"]
    assert knee[0] == (811.1, 34.58) and len(knee) == 6  # README "The capacity search"
    assert round(r["model"]["predicted_capacity"]) == 811
    assert (round(r["capacity"]), round(r["low"]), round(r["high"])) == (830, 779, 884)


def late(shift_p99_pct: float):
    """A tamper: every knee probe invalid for send lateness that moved its p50 by 30% and its
    p99 by shift_p99_pct (the real sentence's opening, as loadgen/validity.py writes it)."""

    def tamper(k, spec, row, readings):
        if spec.role == "knee":
            row = {
                **row,
                "valid": False,
                "invalid_reasons": "send lateness (p99 0.05 ms) moved the p50 latency by up to "
                "30.0% (0.05 of 0.17 ms), more than its precision of 2.0%: the load generator "
                "fell behind its schedule. Fix: pin the load generator",
                "send_lateness_p99_ms": 0.05,
                "lateness_shift_p50_pct": 30.0,
                "lateness_shift_p99_pct": shift_p99_pct,
            }
        return row, readings

    return tamper


def test_lateness_that_spares_the_slos_statistic_does_not_cost_the_probe():
    """A 50 us lateness ruins a 0.17 ms p50 but not the 30 ms p99 the SLO names: the probes
    count (and say why they count), and the capacity is found."""
    s = cell_search()
    run_search(s, MMc(seed=1), late(shift_p99_pct=0.4))
    r = cell_entry(s, 0.0)
    assert s.failure is None and r["status"] == "found", r
    knees = [p for p in r["probes"] if p["role"] == "knee"]
    assert knees and all(p["used"] and not p["valid"] and p["valid_for_slo"] for p in knees)
    estimates = [p for p in knees if p["verdict"].startswith("estimate")]
    assert estimates and all("not the p99" in p["verdict"] for p in estimates)
    assert r["low"] <= EXACT_RPS <= r["high"], r


def test_lateness_that_moved_the_slos_statistic_still_costs_the_probe():
    s = cell_search()
    run_search(s, MMc(seed=1), late(shift_p99_pct=5.0))
    knees = [p for p in cell_entry(s, 0.0)["probes"] if p["role"] == "knee"]
    assert knees and not any(p["used"] for p in knees)
    assert not any(p["valid_for_slo"] for p in knees)


def _md1_search():
    """One worker, a constant 2 ms service (M/D/1), p99 <= 10 ms."""
    doc = {**DOC, "servers": {"md1": {"cmd": "md1 --port {port}", "threads": 1}}}
    doc["search"] = {"slo": {"p99": "10ms"}, "max_trials": 8}
    plan = compile_document(doc, "sim.yaml")
    s = CellSearch(plan.cells[0], plan.experiment.search, "sim.yaml")
    sim = MMc(c=1, service_s=0.002, seed=8, service_scv=0.0)
    return s, sim


def test_a_constant_service_time_gets_the_m_d_1_tail_not_the_m_m_1_one():
    """The M/M/1 shape puts a constant-service server's p99 at twice its true value, so its
    first knee probe would land near rho 0.6 instead of at the knee; with the measured SCV the
    station is M/G/1 with the tail asymptote (models/queues.py mg1_tail, within 2% of a
    simulation), its first probe lands near the truth and the interval holds it."""
    truth = rate_for_slo(
        Station("shared_queue", 1, 0.002, 0.0, overhead_s=OVERHEAD_S, tail_percentiles=True),
        "p99",
        0.010,
    )
    mm1 = rate_for_slo(Station("shared_queue", 1, 0.002, overhead_s=OVERHEAD_S), "p99", 0.010)
    assert mm1 < 0.85 * truth  # the shape this replaced: far off
    s, sim = _md1_search()
    specs = run_search(s, sim)
    r = cell_entry(s, wall_s=0.0)
    assert r["status"] == "found" and "M/G/1" in str(r["model"]), r["model"]
    first = next(p.level for p in specs if p.role == "knee")
    assert abs(first / truth - 1) < 0.06, (first, truth)
    assert r["low"] <= truth <= r["high"] and abs(r["capacity"] / truth - 1) < 0.06, (r, truth)


def test_an_overloaded_probe_recalibrates_the_model_to_what_the_server_completed():
    """A closed saturation probe can overstate what the server sustains under open arrivals
    (many users batch better): here it reads 1.6 x the truth, so the model's first knee probe
    lands past saturation. The overloaded probe's completions (the server's real rate) then
    calibrate the model, and the search still finds the knee within its trials, instead of
    stepping down 2% at a time from the failed level."""
    true_max = 4 / 0.004

    def overstated(k, spec, row, readings):
        if spec.role == "saturation":
            row = {**row, "throughput_rps": 1.6 * true_max}
        return row, readings

    s = cell_search()
    specs = run_search(s, MMc(seed=3), overstated)
    r = cell_entry(s, 0.0)
    first = r["probes"][2]
    assert first["level"] > true_max and first["verdict"].startswith("upper bound: overloaded")
    assert specs[3].level < true_max  # the next probe below saturation, where the new model says
    # past saturation the simulated server completes what its 4 workers can (trials.csv's
    # throughput would still read the offered rate: the drain answers every request)
    assert r["model"]["saturation_rps"] == pytest.approx(true_max, rel=0.05)
    assert any("the server completed" in n for n in r["model"]["notes"])
    assert r["status"] == "found" and len(specs) <= 8
    assert r["low"] <= EXACT_RPS <= r["high"], r


def test_a_model_that_cannot_be_evaluated_gives_the_cell_up_in_one_line(monkeypatch):
    """A model bug (an overflow, as the M/G/1 tail's once was) ends the cell's search with
    its reason, not the run with a traceback; the probes already run stay recorded."""
    import orchestrator.search.capacity_estimate as est_mod

    def broken(*a, **k):
        raise OverflowError("math range error")

    monkeypatch.setattr(est_mod, "rate_for_slo", broken)
    s = cell_search()
    specs = run_search(s, MMc(seed=3))
    assert [p.role for p in specs] == ["service", "saturation"]
    r = cell_entry(s, 0.0)
    assert r["status"] == "failed"
    assert "could not be evaluated: OverflowError: math range error" in r["stopped"]
    assert r["model"]["name"] == "M/M/4" and math.isnan(r["model"]["predicted_capacity"])
    assert r["curve"] == {"level": [], "latency_ms": []}
    assert len(r["probes"]) == 2
