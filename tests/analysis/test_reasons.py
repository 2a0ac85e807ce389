"""A cell's reasons said once (analysis/reasons.py): the sentences the producers write
(loadgen/validity.py, measure/noise.py, run/trial_row.py) taken apart and grouped, and each output
that shows them (report, compare, check; the run summary: tests/cli/test_summary.py) showing a
multi-trial cell's reasons as one block."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from loadgen import validity
from orchestrator.analysis import check, compare, reasons, report
from orchestrator.measure import noise
from orchestrator.run.trial_row import ServerEnd, server_reasons

from .conftest import synthetic_run

LATE_FIX = validity.FIX_LATE.removeprefix("Fix: ")


def late(shift_ms: float, figure: str = "p50", reported_ms: float = 1.0, **summary) -> list[str]:
    """validity.verdict's reasons for an open-load trial whose `figure` send lateness moved
    by shift_ms (its precision: the 2% floor)."""
    f = validity.Figure(figure, 500, reported_ms, reported_ms - shift_ms, reported_ms * 0.99)
    figs = validity.Figures(1000, {figure: f}, lambda ks: [reported_ms] * len(ks), lambda x: 0)
    summary = {"send_lateness_p99_ms": 5.0, "send_lateness_max_ms": 10.0, **summary}
    row = {"completed": 1000, "dropped": 0, "target_rate": 0.0, "error_rate": 0.0}
    return validity.verdict(row, summary, "open", figs)


def noisy(steal: float = 0.0, foreign: float = 0.0) -> list[str]:
    """noise.noise_reasons for a trial with that steal and foreign CPU on CPUs 0 and 1."""
    row = dict.fromkeys(noise.columns(), 0.0)
    row.update(noise_steal_pct=steal, noise_foreign_cpu_pct=foreign, noise_cpus="0,1")
    return noise.noise_reasons(row, True)


def joined(*reasons_: list[str]) -> str:
    return "; ".join(r for rs in reasons_ for r in rs)


def test_a_send_lateness_reason_is_its_kind_its_figure_and_its_fix():
    [text] = late(0.213)
    r = reasons.parse(text)
    assert r.kind == "send lateness"
    assert r.headline == "moved the p50 latency by up to 21.3%"
    assert r.figures == ("21.3",)
    assert r.fix == LATE_FIX


def test_six_late_trials_read_as_one_line_with_the_range_and_one_fix():
    texts = [joined(late(s)) for s in (0.021, 0.05, 0.08, 0.11, 0.15, 0.213)]
    assert reasons.lines(texts) == [
        "send lateness x6: moved the p50 latency by up to 2.1–21.3%",
        f"  Fix: {LATE_FIX}",
    ]


def test_a_mix_of_kinds_gives_a_line_each_most_trials_first_each_fix_once():
    lag = late(0.09, figure="p99", loop_lag_p99_ms=12.0)  # late and lagging: two kinds
    assert len(lag) == 2
    texts = [joined(late(0.05)), joined(lag), joined(late(0.3))]
    got = reasons.lines(texts)
    assert got[0] == (
        "send lateness x3: moved the p50 latency by up to 5.0–30.0% (x2), "
        "moved the p99 latency by up to 9.0%"
    )
    assert got[1] == f"  Fix: {LATE_FIX}"
    assert got[2] == "load-generator event-loop lag: p99 12.0 ms > 5.0 ms"
    assert got[3] == "  " + validity.FIX_STALL  # a fix of its own, said once
    assert len(got) == 4


def test_one_trial_alone_reads_as_its_own_line_without_a_count():
    assert reasons.lines([joined(noisy(steal=9.0))]) == ["CPU steal: 9.0% > 5%"]


def test_reasons_without_a_fix_group_too_and_keep_their_limits():
    texts = [joined(noisy(steal=6.1)), joined(noisy(steal=9.0, foreign=60)), joined(noisy(0, 45))]
    assert reasons.lines(texts) == [
        "CPU steal x2: 6.1–9.0% > 5%",
        "other processes used x2: 45–60% of a CPU on CPUs 0,1 (> 10%)",
    ]


def test_the_rest_of_the_load_generators_reasons():
    row = {"completed": 0, "dropped": 12, "target_rate": 100.0, "error_rate": 0.5}
    texts = [
        joined(validity.verdict(row, {}, "open", None, 91, 1.0, max_error_rate=0.01)),
        joined(validity.verdict(dict(row, dropped=40), {}, "open", None, 95, 1.0)),
    ]
    assert reasons.lines(texts) == [
        "no request completed in the measured window x2",
        "achieved send rate x2: 91.0–95.0/s misses the target 100/s by -9.0 to -5.0% (limit ±1%)",
        "  " + validity.FIX_RATE,
        "arrivals dropped past the outstanding-request cap x2: 12–40",
        "  " + validity.FIX_DROPPED,
        "error rate: 50.00% > 1%",
        "  " + validity.FIX_ERRORS,
    ]


def test_a_dead_servers_log_pointer_is_part_of_its_reason_and_the_exit_code_stays():
    ends = [
        ServerEnd(False, False, 1, 8000, Path(f"/r/cells/a/trial-{k}/server.log")) for k in (1, 2)
    ]
    texts = [joined(server_reasons(e)) for e in ends]
    assert reasons.split_reasons(texts[0]) == [texts[0]]  # "; see LOG" is no reason of its own
    assert reasons.lines(texts) == ["server died during the trial x2 (exit 1)"]


def test_a_shards_or_a_hosts_reasons_stay_apart_by_place():
    texts = [
        f"shard h1: {late(0.05)[0]}",
        f"shard h2: {late(0.08)[0]}",
        f"shard h1: {late(0.1)[0]}",
    ]
    got = reasons.lines(texts)
    assert got[0] == "shard h1: send lateness x2: moved the p50 latency by up to 5.0–10.0%"
    assert got[2] == "shard h2: send lateness: moved the p50 latency by up to 8.0%"
    assert got.count(f"  Fix: {LATE_FIX}") == 1


def test_no_reason_and_unknown_shapes():
    assert reasons.lines(["", None, float("nan")]) == []
    texts = ["the Dask scheduler died during the trial (lost)"] * 2
    assert reasons.lines(texts) == ["the Dask scheduler died during the trial x2 (lost)"]


# --- the outputs ----------------------------------------------------------------------------
def _cell_rows(cell: str, invalid: list[str], noise_: list[str] | None = None) -> list[dict]:
    """Six trials of one cell: `invalid` the reasons of the first len(invalid) trials, the
    rest valid; noise_ likewise for noise_reasons."""
    noise_ = noise_ or []
    rows = []
    for k in range(1, 7):
        bad = k <= len(invalid)
        rows.append(
            {
                "cell_id": cell,
                "trial": k,
                "server": "py",
                "rate": 100,
                "requests": 20,
                "throughput_rps": 1000.0,
                "latency_p50_ms": 1.0 + 0.01 * k,
                "latency_p99_ms": 2.0,
                "error_rate": 0.0,
                "valid": not bad,
                "invalid_reasons": invalid[k - 1] if bad else "",
                "quiet": k > len(noise_),
                "noise_reasons": noise_[k - 1] if k <= len(noise_) else "",
            }
        )
    return rows


LATE6 = [joined(late(s)) for s in (0.021, 0.05, 0.08, 0.11, 0.15, 0.213)]
GROUPED = "send lateness x6: moved the p50 latency by up to 2.1–21.3%"


def test_the_reports_why_invalid_column_holds_one_line_and_one_fix():
    trials = pd.DataFrame(_cell_rows("a", LATE6, [joined(noisy(6.1)), joined(noisy(9.0))]))
    page = report._summary(trials, ["server", "rate"])
    assert GROUPED in page and page.count("Fix: pin the load generator") == 1
    assert "CPU steal x2: 6.1–9.0% &gt; 5%" in page
    assert "moved the p50 latency by up to 5.0%" not in page  # no trial's own paragraph


def test_compare_and_check_name_each_reason_once_with_its_fix(tmp_path, analysis):
    base = synthetic_run(tmp_path / "base", _cell_rows("a", []), requests=True)
    cand = synthetic_run(
        tmp_path / "cand",
        _cell_rows("a", LATE6[:3], [""] * 3 + [joined(noisy(6.1)), joined(noisy(9.0))]),
        [{"p50_ms": {"lt": 5}}],
        requests=True,
    )
    [cell] = compare.compare_runs(base, cand).cells
    assert cell.left_out == [
        "candidate: invalid: send lateness x3: moved the p50 latency by up to 2.1–8.0%",
        f"  Fix: {LATE_FIX}",
        "candidate: noisy: CPU steal x2: 6.1–9.0% > 5%",
    ]
    out = analysis("compare", base, cand).output
    assert "send lateness x3: moved the p50 latency by up to 2.1–8.0%" in out, out
    assert out.count("Fix: pin the load generator") == 1, out

    [v] = check.check_run(cand)
    assert v.left_out == tuple(line.removeprefix("candidate: ") for line in cell.left_out)
    r = analysis("check", cand)
    assert "invalid: send lateness x3: moved the p50 latency by up to 2.1–8.0%" in r.output
    assert r.output.count("Fix: pin the load generator") == 1, r.output
