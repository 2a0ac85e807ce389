"""The run summary and plan output as a person reads them: the summary fits 80 columns with
no number cut, a wide terminal shows more, closed-load rows show no arrival rate, and plan
prints lengths as h/m/s."""

import io
import re

import pandas as pd
import pytest
from rich.console import Console

from orchestrator.api.summary import rate_only_axes, summary_table
from orchestrator.numbers import fmt, fmt_span

AXES = ["mode", "connections", "rate", "server"]
DOC = {
    "load": {"mode": "{mode}", "connections": "{connections}", "rate": "{rate}"},
    "servers": {"python-async-server": {"impl": "python"}},
}


def _trials() -> pd.DataFrame:
    rows = []
    cells = [("closed", 1, 300), ("closed", 16, 300), ("open", 16, 600), ("open", 16, 850)]
    for i, (mode, conn, rate) in enumerate(cells):
        for trial in (1, 2):
            rows.append(
                dict(
                    cell_id=f"cell{i}",
                    trial=trial,
                    mode=mode,
                    connections=conn,
                    rate=rate,
                    server="python-async-server",
                    load_mode=mode,
                    throughput_rps=637.4 + 10_000 * i,
                    latency_p50_ms=1.2345 * (i + 1),
                    latency_p90_ms=3.3,
                    latency_p99_ms=1018.77 + i,
                    latency_p999_ms=2345.6,
                    latency_max_ms=12345.6,
                    errors=3 * i,
                    valid=not (i == 3 and trial == 2),
                    invalid_reasons="",
                    quiet=True,
                    noise_reasons="",
                    server_cpu_pct=97.3,
                )
            )
    return pd.DataFrame(rows)


def render(width: int, trials=None) -> str:
    buf = io.StringIO()
    c = Console(width=width, file=buf, color_system=None)
    c.print(summary_table(_trials() if trials is None else trials, AXES, width, DOC))
    return buf.getvalue()


@pytest.mark.parametrize(
    "v,text",
    [
        (0, "0"),
        (0.41234, "0.412"),
        (3.14159, "3.14"),
        (42.123, "42.1"),
        (637.4, "637"),
        (1018.3, "1.02k"),
        (10234, "10.2k"),
        (102345, "102k"),
        (1.02e6, "1.02M"),
        (float("nan"), "-"),
        (12, "12"),
    ],
)
def test_compact_numbers(v, text):
    assert fmt(v) == text


def test_summary_at_80_columns_cuts_no_number():
    out = render(80)
    assert "…" not in out and "..." not in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    t = _trials()
    for _cid, g in t.groupby("cell_id"):
        use = g[g["valid"]]
        row = next(
            line
            for line in out.splitlines()
            if line.startswith(g["mode"].iloc[0]) and fmt(use["throughput_rps"].mean()) in line
        )
        for col in ("throughput_rps", "latency_p50_ms", "latency_p99_ms"):
            assert re.search(rf"(^|\s){re.escape(fmt(use[col].mean()))}(\s|$)", row), (col, row)
    assert "left out for width" in out  # and it says which columns went


def test_a_wide_terminal_shows_more_columns():
    narrow, wide = render(80), render(200)
    for header in ("p90", "p99.9", "cpu%", "max"):
        assert re.search(rf"\s{re.escape(header)}(\s|$)", wide.splitlines()[1]), header
    assert "left out for width" not in wide
    assert len(wide.splitlines()[1]) > len(narrow.splitlines()[1])


def test_closed_rows_show_no_arrival_rate():
    out = render(200)
    closed = [line.split() for line in out.splitlines() if line.startswith("closed")]
    opened = [line.split() for line in out.splitlines() if line.startswith("open ")]
    assert closed and all(cells[2] == "-" for cells in closed)
    assert [cells[2] for cells in opened] == ["600", "850"]
    assert rate_only_axes(DOC, AXES) == {"rate"}
    # an axis used anywhere else as well is a real axis of every row
    doc = {**DOC, "workload": {"params": {"n": "{rate}"}}}
    assert rate_only_axes(doc, AXES) == set()


def test_an_invalid_trial_is_left_out_of_the_means():
    out = render(200)
    row = next(line for line in out.splitlines() if " 850 " in line)
    assert "1/2" in row and fmt(30637.4) in row


@pytest.mark.parametrize(
    "s,text",
    [
        (0, "0s"),
        (0.25, "250ms"),
        (1.5, "1.5s"),
        (20, "20s"),
        (120, "2m"),
        (150, "2m30s"),
        (3600, "1h"),
        (3900, "1h05m"),
    ],
)
def test_plan_lengths_read_as_h_m_s(s, text):
    assert fmt_span(s) == text


def test_a_cells_noisy_trials_are_named_once_per_reason():
    """Six trials of a cell, four noisy: one line per reason with its trials' count and the
    range of its figures (measure/noise.py's own sentences), not a paragraph per trial."""
    from orchestrator.measure import noise

    def reasons(steal: float, foreign: float) -> str:
        row = dict.fromkeys(noise.columns(), 0.0)
        row.update(noise_steal_pct=steal, noise_foreign_cpu_pct=foreign, noise_cpus="0,1")
        return "; ".join(noise.noise_reasons(row, True))

    t = _trials()
    six = pd.concat([t[t["cell_id"] == "cell2"].iloc[[0]]] * 6, ignore_index=True)
    six["trial"] = range(1, 7)
    readings = [(6.1, 0), (9.0, 0), (7.5, 0), (5.5, 0), (0, 0), (0, 0)]
    six["noise_reasons"] = [reasons(s, f) for s, f in readings]
    six["quiet"] = six["noise_reasons"] == ""
    out = render(200, six)
    label = "mode=open, connections=16, rate=600, server=python-async-server"
    assert f"noisy {label} #1, #2, #3, #4: CPU steal x4: 5.5–9.0% > 5%" in out, out
    assert out.count("CPU steal") == 1, out

    readings[0] = (6.1, 60)  # a second kind: a line each under the cell's
    six["noise_reasons"] = [reasons(s, f) for s, f in readings]
    lines = render(200, six).splitlines()
    i = next(k for k, line in enumerate(lines) if "#1, #2, #3, #4:" in line)
    assert lines[i + 1 : i + 3] == [
        "  CPU steal x4: 5.5–9.0% > 5%",
        "  other processes used: 60% of a CPU on CPUs 0,1 (> 10%)",
    ], lines
