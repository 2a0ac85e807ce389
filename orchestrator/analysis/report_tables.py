"""The report's tables (report.py puts them on the page): the summary per cell (invalid trials
in red, noisy ones in amber, each reason once per cell with its trials' count and the range of
its figures, each fix once; the precision reached with `precision:`), the endpoints of a mix,
the threshold verdicts, the kernel's TCP counters, the host's own figures and the queueing
models. Each returns an HTML fragment ("" when the run has nothing for it)."""

from __future__ import annotations

import html
import math

import pandas as pd

from .. import results
from ..errors import PerfctlError
from ..numbers import fmt
from . import check, reasons
from .views import flag


def _e(v) -> str:
    return html.escape(str(v))


def _num(v, spec: str) -> str:
    """A number as the tables print it (numbers.fmt, infinity as ∞); text stays text."""
    try:
        float(v)
    except (TypeError, ValueError):
        return _e(v)
    return fmt(v, spec, inf="∞")


def _reasons(g: pd.DataFrame, mask: pd.Series, column: str) -> str:
    """The cell's reasons in `column` of the trials in mask, as HTML: each reason once with
    its trials' count and figures, each fix once under it (reasons.lines)."""
    if column not in g:
        return ""
    return "<br>".join(
        f'<span class="fix">{_e(line.strip())}</span>' if line.startswith(" ") else _e(line)
        for line in reasons.lines(g.loc[mask, column])
    )


def _precision(g: pd.DataFrame) -> str:
    if "precision_reached" not in g:
        return "-"
    last = g.iloc[-1]
    half = _num(last.get("precision_half_width_pct"), ".1f")
    ok = bool(last.get("precision_reached"))
    return (
        f'<span class="{"good" if ok else "warn"}">±{half}% '
        f"{'reached' if ok else 'not reached'}</span> (target "
        f"{_num(last.get('precision_target_pct'), 'g')}%)"
    )


def _summary(trials: pd.DataFrame, axes: list[str]) -> str:
    cols = [
        ("trials", None),
        ("throughput req/s", "throughput_rps", ",.0f"),
        ("p50 ms", "latency_p50_ms", ".3f"),
        ("p90 ms", "latency_p90_ms", ".3f"),
        ("p99 ms", "latency_p99_ms", ".3f"),
        ("p99.9 ms", "latency_p999_ms", ".3f"),
        ("max ms", "latency_max_ms", ".2f"),
        ("error rate", "error_rate", ".4f"),
    ]
    head = "".join(f'<th class="l">{_e(a)}</th>' for a in axes)
    head += "".join(f"<th>{_e(c[0])}</th>" for c in cols)
    head += (
        '<th>valid</th><th>quiet</th><th>precision</th><th class="l">why invalid</th>'
        '<th class="l">why noisy</th>'
    )
    rows = []
    for _, g in trials.groupby("cell_id", sort=False):
        valid, quiet = flag(g, "valid"), flag(g, "quiet")
        cells = "".join(f'<td class="l">{_e(g[a].iloc[0])}</td>' for a in axes if a in g)
        cells += f"<td>{len(g)}</td>"
        use = g[valid] if valid.any() else g
        for c in cols[1:]:
            cells += f"<td>{_num(use[c[1]].mean(), c[2]) if c[1] in use else '-'}</td>"
        cells += f'<td class="{"good" if valid.all() else "bad"}">{int(valid.sum())}/{len(g)}</td>'
        cells += f'<td class="{"good" if quiet.all() else "warn"}">{int(quiet.sum())}/{len(g)}</td>'
        cells += f"<td>{_precision(g)}</td>"
        cells += f'<td class="l">{_reasons(g, ~valid, "invalid_reasons")}</td>'
        cells += f'<td class="l">{_reasons(g, ~quiet, "noise_reasons")}</td>'
        cls = "invalid" if not valid.all() else ("noisy" if not quiet.all() else "")
        rows.append(f'<tr class="{cls}">{cells}</tr>')
    return (
        f"<table><tr>{head}</tr>{''.join(rows)}</table><p>Means over each cell's valid "
        "trials (over all of them, in a red row, when none is valid). <b>valid</b>: the "
        "measurement worked (the load generator kept its schedule, the server answered). "
        "<b>quiet</b>: the host left the trial alone (no CPU steal, no other process on "
        "the trial's CPUs); <code>perfctl compare</code> and <code>check</code> use only "
        "valid, quiet trials. An amber row had a noisy trial.</p>"
    )


def _endpoints(run: results.Run) -> str:
    """Per cell and endpoint of a mix (run.endpoints): the mean over the cell's valid trials."""
    ep = run.endpoints
    if ep.empty or ep.groupby("cell_id")["endpoint"].nunique().max() < 2:
        return ""
    axes = [a for a in run.axes if a in ep]
    cols = [
        ("share", "share", ".1%"),
        ("throughput req/s", "throughput_rps", ",.0f"),
        ("p50 ms", "latency_p50_ms", ".3f"),
        ("p90 ms", "latency_p90_ms", ".3f"),
        ("p99 ms", "latency_p99_ms", ".3f"),
        ("errors", "errors", ",.0f"),
        ("error rate", "error_rate", ".4f"),
    ]
    head = "".join(f'<th class="l">{_e(a)}</th>' for a in [*axes, "endpoint"])
    head += "".join(f"<th>{_e(c[0])}</th>" for c in cols)
    head += '<th>valid</th><th class="l">why not</th>'
    rows = []
    for (_, name), g in ep.groupby(["cell_id", "endpoint"], sort=False):
        valid = flag(g, "valid")
        use = g[valid] if valid.any() else g
        cells = "".join(f'<td class="l">{_e(g[a].iloc[0])}</td>' for a in axes)
        cells += f'<td class="l">{_e(name)}</td>'
        cells += "".join(f"<td>{_num(use[c[1]].mean(), c[2])}</td>" for c in cols)
        cells += f'<td class="{"good" if valid.all() else "bad"}">{int(valid.sum())}/{len(g)}</td>'
        why = "; ".join(dict.fromkeys(r for r in g["validity"] if r))
        cells += f'<td class="l">{_e(why)}</td>'
        rows.append(f'<tr class="{"" if valid.all() else "invalid"}">{cells}</tr>')
    return (
        f"<h3>Per endpoint</h3><table><tr>{head}</tr>{''.join(rows)}</table><p>Each request "
        "of the workload's mix on its own (endpoints.csv): means over the cell's valid trials "
        "in which the endpoint's own figures hold (enough requests for a p99, errors under "
        "the limit); latency percentiles from the trial's HdrHistograms, within 0.1%.</p>"
    )


TCP_COLUMNS = [
    ("listen overflows", "tcp_listen_overflows"),
    ("listen drops", "tcp_listen_drops"),
    ("retransmitted segments", "tcp_retrans_segs"),
    ("timeouts", "tcp_timeouts"),
    ("RSTs sent", "tcp_resets"),
    ("aborts on data", "tcp_abort_on_data"),
    ("accept queue peak", "tcp_accept_queue_max"),
]


def _kernel_tcp(trials: pd.DataFrame, axes: list[str]) -> str:
    """Per cell, the kernel's TCP counters over the load (mean over its trials)."""
    shown = [(label, col) for label, col in TCP_COLUMNS if col in trials]
    if not shown:
        return ""
    head = "".join(f'<th class="l">{_e(a)}</th>' for a in axes)
    head += "<th>trials</th>" + "".join(f"<th>{_e(label)}</th>" for label, _ in shown)
    head += '<th class="l">counted in</th>'
    rows = []
    for _, g in trials.groupby("cell_id", sort=False):
        cells = "".join(f'<td class="l">{_e(g[a].iloc[0])}</td>' for a in axes if a in g)
        cells += f"<td>{len(g)}</td>"
        cells += "".join(f"<td>{_num(g[col].mean(), ',.0f')}</td>" for _, col in shown)
        scopes = sorted({str(v) for v in g.get("tcp_counters_scope", pd.Series(dtype=str))})
        cells += f'<td class="l">{_e(", ".join(scopes) or "-")}</td>'
        rows.append(f"<tr>{cells}</tr>")
    return (
        "<h2>Kernel TCP counters</h2>"
        f"<table><tr>{head}</tr>{''.join(rows)}</table><p>Per trial, the change of the "
        "kernel's counters (/proc/net/netstat, /proc/net/snmp) over the load, read in the "
        "server's network namespace; the mean over the cell's trials. <b>listen "
        "overflows</b>: handshakes dropped because the accept queue was full (the clients "
        "retry their SYN after 1 s, 3 s, ...). <b>counted in</b> <code>host</code>: the "
        "server shared the host's namespace, so other processes' traffic in the same "
        "seconds is counted too; <code>namespace</code>: the server's own.</p>"
    )


def _thresholds(run: results.Run) -> str:
    try:
        verdicts = check.evaluate(run, check.thresholds_for(run))
    except PerfctlError as e:
        return f'<p class="bad">{_e(e)}</p>'
    if not verdicts:
        return ""
    rows = []
    for v in verdicts:
        cls = "good" if v.passed else "bad"
        rows.append(
            f'<tr><td>{v.threshold.index}</td><td class="l">{_e(v.threshold.text)}</td>'
            f'<td class="l">{_e(v.cell_label)}</td><td>{_num(v.measured, ".4g")}</td>'
            f"<td>{v.trials}{f' ({v.excluded} left out)' if v.excluded else ''}</td>"
            f'<td class="{cls}">{"pass" if v.passed else "BREACH"}</td>'
            f'<td class="l">{_e("; ".join(x for x in (v.note, v.usage) if x))}</td></tr>'
        )
    breaches = sum(not v.passed for v in verdicts)
    badge = (
        f'<span class="flag">{breaches} breach{"es" if breaches != 1 else ""}</span>'
        if breaches
        else '<span class="flag ok">all pass</span>'
    )
    return (
        f"<h2>Thresholds {badge}</h2><table><tr><th>#</th><th class='l'>threshold</th>"
        f"<th class='l'>cell</th><th>measured (mean of valid, quiet trials)</th><th>trials</th>"
        f"<th>verdict</th>"
        f"<th class='l'>note</th></tr>{''.join(rows)}</table>"
    )


def _band(r, stat: str) -> str:
    lo, hi = r.get(f"pred_{stat}_low_ms", math.nan), r.get(f"pred_{stat}_high_ms", math.nan)
    if not (isinstance(lo, float) and math.isfinite(lo)):
        return ""
    return f" [{_num(lo, '.3g')}, {_num(hi, '.3g')}]"


def _models(table: pd.DataFrame, what_if: dict | None = None) -> str:
    """The queueing models' table: every prediction with its band and its verdict, and per
    cell the bottleneck line, the operational-law checks and a rejection's evidence."""
    if table.empty or "model" not in table:
        return ""
    rows = []
    for _, r in table.iterrows():
        cls = "fallback" if bool(r.get("from_invalid", False)) else ""
        cells = [
            f'<td class="l">{_e(r.get("label", r["cell_id"]))}</td>',
            f'<td class="l">{_e(r.get("model", ""))}'
            f"<br><small>{_e(str(r.get('dispatch', '') or '').replace('_', ' '))} "
            f"({_e(r.get('dispatch_source', '') or '')})</small></td>",
        ]
        for stat in ("mean", "p99"):
            status = str(r.get(f"verdict_{stat}", "no prediction") or "no prediction")
            vcls = {"held": "good", "rejected": "bad"}.get(status, "")
            cells += [
                f"<td>{_num(r.get(f'measured_{stat}_ms'), '.3f')}</td>",
                f"<td>{_num(r.get(f'pred_{stat}_ms'), '.3f')}{_e(_band(r, stat))}</td>",
                f"<td>{_num(100 * r.get(f'err_{stat}', math.nan), '+.0f')}</td>",
                f'<td class="{vcls}">{_e(status)}</td>',
            ]
        rows.append(f'<tr class="{cls}">{"".join(cells)}</tr>')
        notes = [str(r.get("bottleneck_line", "") or "")]
        if r.get("verdict") == "rejected":
            notes.append(
                f"rejected: {r.get('verdict_why', '')}; evidence: {r.get('verdict_causes', '')}"
            )
        elif r.get("verdict_why"):
            notes.append(str(r.get("verdict_why")))
        if r.get("law_checks"):
            notes.append(f"laws: {r.get('law_checks')}")
        notes = [n for n in notes if n and n != "nan"]
        if notes:
            rows.append(
                f'<tr class="{cls}"><td></td><td class="l" colspan="9"><small>'
                + "<br>".join(_e(n) for n in notes)
                + "</small></td></tr>"
            )
    wi = ""
    if what_if and what_if.get("cells"):
        what = ", ".join(f"{k}={v:g}" for k, v in what_if["changes"].items())
        wrows = "".join(
            f'<tr><td class="l">{_e(c.get("label", c["cell_id"]))}</td>'
            f'<td class="l">{_e(c.get("model", ""))}</td>'
            f"<td>{_num(c.get('pred_mean_ms'), '.3f')}"
            f"{_e(_band(c, 'mean'))}</td>"
            f"<td>{_num(c.get('pred_p99_ms'), '.3f')}{_e(_band(c, 'p99'))}</td>"
            f'<td class="l">{_e(c.get("basis_verdict", ""))}</td>'
            f'<td class="l">{_e(c.get("notes", ""))}</td></tr>'
            for c in what_if["cells"]
        )
        wi = (
            f"<h3>What if {_e(what)}</h3><table><tr><th class='l'>cell</th>"
            "<th class='l'>model</th><th>predicted mean ms [band]</th>"
            "<th>predicted p99 ms [band]</th><th class='l'>the model's verdict on the "
            "measured cell</th><th class='l'>notes</th></tr>"
            f"{wrows}</table>"
        )
    return (
        "<h2>Queueing models</h2><table><tr><th class='l'>cell</th><th class='l'>model</th>"
        "<th>measured mean ms</th><th>predicted mean ms [band]</th><th>error %</th>"
        "<th>verdict</th><th>measured p99 ms</th><th>predicted p99 ms [band]</th>"
        "<th>error %</th><th>verdict</th></tr>"
        f"{''.join(rows)}</table><p>A prediction is <b>held</b> when the measurement's "
        "interval meets the band its parameters' uncertainty allows, <b>rejected</b> when "
        "not (or when the model's assumptions do not hold in the run), <b>inconclusive</b> "
        "when the band is wider than the precision asked (10% mean, 25% p99). Yellow rows: "
        "the cell had no valid trial, so its invalid trials were used. "
        "<code>perfctl model</code> prints every model.</p>" + wi
    )


def _host_check(info: dict) -> str:
    """The host's figures measured before the first trial (measure/hostcheck.py), beside the
    results they bound, with what they limit."""
    c = info.get("host_check")
    if not c:
        return ""
    rows = [
        ("timer (time.sleep 1 ms, late by)", c.get("timer_p50_us"), c.get("timer_p99_us")),
        ("wake-up (thread to thread)", c.get("wake_p50_us"), c.get("wake_p99_us")),
        ("loopback round trip", c.get("loopback_rtt_p50_us"), c.get("loopback_rtt_p99_us")),
    ]
    cells = "".join(
        f"<tr><td class='l'>{_e(name)}</td><td>{_num(p50, '.0f')} us</td>"
        f"<td>{_num(p99, '.0f')} us</td></tr>"
        for name, p50, p99 in rows
    )
    limits = "".join(f"<li>{_e(v)}</li>" for v in c.get("verdict") or [])
    return (
        "<h2>This host</h2><table><tr><th class='l'>measured before the first trial</th>"
        f"<th>p50</th><th>p99</th></tr>{cells}<tr><td class='l'>CPU steal</td>"
        f"<td colspan='2'>{_num(c.get('steal_pct'), '.1f')}%</td></tr></table>"
        + (f"<ul>{limits}</ul>" if limits else "<p>Nothing measured here limits the trials.</p>")
    )
