"""`perfctl report RUN_DIR`: one self-contained RUN_DIR/report.html.

Every figure is embedded as a base64 PNG (the SVGs stay in plots/ beside it); the page loads
nothing from anywhere else. Sections: with `search:`, the capacity per cell and its figure; the summary table (invalid trials in red, noisy ones in
amber, each reason once per cell with its trials' count and figures' range, each fix once; the precision reached with `precision:`), threshold verdicts
when the experiment has thresholds, the kernel's TCP counters per cell, the figures, the models table (fitted in memory), the
run's history (its experiment's series and change points, when the run is in its history
store), and the run's configuration and host (run.json).

A small inline script sets <body data-figures="ok"> once every image has decoded with a
non-zero size ("failed:N" otherwise); tests read it from a headless browser's DOM.
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import pandas as pd

from .. import results
from ..errors import PerfctlError
from ..history import add, figure, record, trend
from ..history.store import Store
from ..numbers import fmt
from . import check, flamegraph, queueing, reasons
from .figures import Figure
from .model_figures import draw_models
from .run_figures import draw_run
from .search_figures import capacity_figure
from .views import flag

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1200px;color:#222;padding:0 1em}
h1{margin-bottom:.2em} .sub{color:#666;margin-top:0}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3} td.l,th.l{text-align:left}
tr.invalid td{background:#fde2e2} tr.fallback td{background:#fff4d6}
tr.noisy td{background:#fff4d6} .warn{color:#8a5a00;font-weight:bold}
.bad{color:#b00020;font-weight:bold} .good{color:#1b7f3b;font-weight:bold}
figure{margin:1.5em 0} figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:13px} pre{background:#f7f7f7;padding:1em;overflow:auto;
font-size:12px} .flag{display:inline-block;padding:2px 8px;border-radius:3px;color:#fff;
background:#b00020} .ok{background:#1b7f3b}
.fix{display:inline-block;padding-left:1.5em;color:#555}
"""

SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  document.body.setAttribute('data-figures', bad.length ? 'failed:' + bad.length : 'ok');
  document.body.setAttribute('data-figure-count', String(imgs.length));
});
"""


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


def _profiles(run: results.Run, out: Path) -> str:
    """Links to every trial's flame graph (perfctl run with `profile: true`), with the
    profiler's measured cost and any note (e.g. perf not allowed by the kernel)."""
    infos = sorted(run.path.glob("cells/*/trial-*/profile.json"))
    if not infos:
        return ""
    flamegraph.draw_run(run.path)
    labels = {}
    if not run.trials.empty:
        labels = dict(
            zip(
                run.trials["cell_id"].astype(str),
                (
                    ", ".join(f"{a}={r[a]}" for a in run.axes if a in r)
                    for _, r in run.trials.iterrows()
                ),
            )
        )
    rows = []
    for f in infos:
        info = json.loads(f.read_text())
        tdir = f.parent
        svg = tdir / "profile.svg"
        try:
            href = svg.resolve().relative_to(out.resolve().parent).as_posix()
        except ValueError:
            href = svg.resolve().as_uri()
        link = (
            f'<a href="{_e(href)}">{_e(tdir.parent.name)}/{_e(tdir.name)}</a>'
            if svg.is_file()
            else _e(f"{tdir.parent.name}/{tdir.name}")
        )
        cost = info.get("profiler_cpu_pct_of_one_cpu")
        rows.append(
            f'<tr><td class="l">{link}</td>'
            f'<td class="l">{_e(labels.get(tdir.parent.name, ""))}</td>'
            f'<td class="l">{_e(info.get("tool", ""))}</td>'
            f"<td>{_e(info.get('samples', 0))}</td>"
            f"<td>{'-' if cost is None else _num(cost, '.2f')}</td>"
            f'<td class="l">{_e(info.get("cost", ""))}</td>'
            f'<td class="l">{_e(info.get("note", ""))}</td></tr>'
        )
    return (
        "<h2>Server profiles</h2><table><tr><th class='l'>flame graph</th>"
        "<th class='l'>cell</th><th class='l'>profiler</th><th>samples</th>"
        "<th>profiler CPU % of one CPU</th><th class='l'>what that covers</th>"
        f"<th class='l'>note</th></tr>{''.join(rows)}</table><p>Each trial's server was "
        "sampled while the load ran (py-spy for Python, JDK Flight Recorder for Java, perf "
        "for C); a box's width is its share of the samples. The profiler's cost is measured "
        "per trial (its CPU time over the load) and written in profile.json beside the "
        "graph; benchmarks/profile_overhead.py measures what it costs the server's "
        "throughput.</p>"
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


def _cluster_warning(info: dict) -> str:
    """run.json's cluster warning (an insecure cluster: plain TCP), in the report's head."""
    cluster = info.get("cluster")
    warning = cluster.get("warning") if isinstance(cluster, dict) else None
    return f'<p class="warn">cluster: {_e(warning)}</p>' if warning else ""


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


def _capacity(run: results.Run, plot_dir: Path) -> str:
    """With `search:`: the capacity per cell with its interval, the figure, the probes left
    out and why (capacity.json)."""
    doc = results.read_capacity(run.path)
    if doc is None:
        return ""
    slo = doc["search"]["slo"]
    head = "".join(f'<th class="l">{_e(a)}</th>' for a in run.axes)
    head += (
        "<th>capacity</th><th>interval</th><th>±</th><th>knee probes</th><th>trials</th>"
        '<th>wall s</th><th class="l">model</th><th class="l">stopped</th>'
    )
    rows, left_out = [], []
    for c in doc["cells"]:
        unit = "/s" if c["unit"] == "rate_rps" else " users"
        cells = "".join(f'<td class="l">{_e(c["values"].get(a, ""))}</td>' for a in run.axes)
        ok = bool(c.get("precision_reached"))
        model = c.get("model") or {}
        cells += (
            f"<td>{_num(c['capacity'], '.4g')}{unit}</td>"
            f"<td>{_num(c['low'], '.4g')} – {_num(c['high'], '.4g')}</td>"
            f'<td class="{"good" if ok else "warn"}">{_num(c["half_width_pct"], ".1f")}%</td>'
            f"<td>{c['knee_probes']}</td><td>{c['trials']}</td><td>{_num(c['wall_s'], '.0f')}</td>"
            f'<td class="l">{_e(model.get("name", "-"))}</td>'
            f'<td class="l">{_e(c.get("stopped", ""))}</td>'
        )
        cls = "" if c["status"] == "found" else "invalid" if c["status"] == "failed" else "noisy"
        rows.append(f'<tr class="{cls}">{cells}</tr>')
        left_out += [
            f"<li>{_e(c['label'])}, trial {p['trial']} ({_e(p['role'])}): {_e(p['verdict'])}</li>"
            for p in c["probes"]
            if not p["used"]
        ]
    fig = capacity_figure(doc, plot_dir)
    return (
        f"<h2>Capacity under the SLO ({_e(slo['stat'])} ≤ {slo['latency_ms']:g} ms, errors ≤ "
        f"{100 * slo['error_rate']:g}%)</h2><table><tr>{head}</tr>{''.join(rows)}</table>"
        "<p>The largest load whose median trial meets the SLO, with its "
        f"{100 * doc['search']['confidence']:g}% interval (README: the capacity search). "
        "Every probe is a row of trials.csv; capacity.json holds them all. In the summary "
        "below, a cell's means mix its probes' load levels: read them per probe in "
        "trials.csv.</p>"
        + (f"<p>Probes not used:</p><ul>{''.join(left_out)}</ul>" if left_out else "")
        + (_figure(fig) if fig is not None else "")
    )


def _history(run: results.Run, plot_dir: Path, notes: list[str]) -> str:
    """When the run is in its history store (docs/history.md): each series of its experiment
    on its host with its change points, and their figure. A store that cannot be read is a
    note, never a failed report."""
    location = add.location_of_run(run.info)
    if not location.is_postgres and not Path(location.target).is_file():
        return ""
    try:
        run_id = record.from_run_dir(run.path).run_id
        with Store(location, create=False) as st:
            if run_id not in {r["run_id"] for r in st.runs(run.info.get("experiment"))}:
                return ""
            series = trend.build_series(st, run.info.get("experiment"))
    except PerfctlError as e:
        notes.append(f"history: not shown ({e})")
        return ""
    tails = (s.tail(100) for s in series)
    series = [trend.detect(t) for t in tails if run_id in t.run_ids and len(t.run_ids) > 1]
    if not series:
        return ""
    rows = []
    for s in series:
        cps = "<br>".join(
            _e(
                f"{c.change * 100:+.1f}% [{(c.ratio_low - 1) * 100:+.1f}%, "
                f"{(c.ratio_high - 1) * 100:+.1f}%] p={c.p_value:.2g} from run {c.index + 1} "
                f"({s.started[c.index]}), commits {s.commit_range(c.index)}"
            )
            for c in s.change_points
        )
        rows.append(
            f'<tr><td class="l">{_e(s.cell_label)}</td><td class="l">{_e(s.metric)}</td>'
            f"<td>{len(s.run_ids)}</td><td>{s.run_ids.index(run_id) + 1}</td>"
            f'<td class="l">{cps or "none"}</td></tr>'
        )
    png = figure.draw(series, plot_dir / "history.png", f"{run.info.get('experiment')}: history")
    fig = Figure(
        "history",
        "The history of each cell and metric on this host",
        "Dots: usable trials; line: each run's median; red: a change point, the level after it "
        "and its 95% interval.",
        [png],
    )
    return (
        f"<h2>History</h2><p>This run among the runs of its experiment on this host in "
        f"{_e(str(location))} (valid, quiet trials; change points by E-divisive means, "
        "docs/history.md).</p><table><tr><th class='l'>cell</th><th class='l'>metric</th>"
        "<th>runs</th><th>this run</th><th class='l'>change points: size [95% interval], "
        f"p, first run after, commits</th></tr>{''.join(rows)}</table>" + _figure(fig)
    )


def _figure(f: Figure) -> str:
    data = base64.b64encode(f.png.read_bytes()).decode("ascii")
    return (
        f'<figure id="fig-{_e(f.name)}"><h3>{_e(f.title)}</h3>'
        f'<img alt="{_e(f.title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(f.caption)}</figcaption></figure>"
    )


def build(run_dir, out: Path | None = None, notes: list[str] | None = None) -> Path:
    """Draw every figure of the run into RUN_DIR/plots/ and write the report (default
    RUN_DIR/report.html). Returns the report's path. What it skipped (trials that measured
    nothing, figures no trial has values for, models that would not fit) is said on the page
    and appended to `notes`, one line each."""
    notes = [] if notes is None else notes
    run = results.load(run_dir)
    info = run.info  # a damaged run.json stops it here, before any figure is drawn
    trials = run.trials
    notes.extend(run.damaged())
    out = Path(out) if out else run.path / "report.html"
    plot_dir = run.path / "plots"
    figs = draw_run(run, plot_dir, notes)
    try:
        table = queueing.queueing_table(run, notes)
    except (ValueError, KeyError) as e:
        notes.append(f"models: not fitted ({type(e).__name__}: {e})")
        table = pd.DataFrame()
    what_if = run.models.get("what_if") if isinstance(run.models, dict) else None
    figs += draw_models(run, table, plot_dir, (what_if or {}).get("changes"))
    invalid = int((~trials["valid"].fillna(False).astype(bool)).sum()) if not trials.empty else 0
    badge = (
        f'<span class="flag">{invalid} of {len(trials)} trials invalid</span>'
        if invalid
        else f'<span class="flag ok">all {len(trials)} trials valid</span>'
    )
    noisy = int((~flag(trials, "quiet")).sum()) if not trials.empty else 0
    if noisy:
        badge += f' <span class="flag" style="background:#8a5a00">{noisy} noisy</span>'
    host = info.get("host", {})
    sub = (
        f"{_e(info.get('started', ''))} · {_e(host.get('hostname', ''))} · "
        f"{_e(host.get('cpu_count', '?'))} CPUs · perfctl {_e(host.get('perfctl_version', ''))}"
        f" · commit {_e(str(host.get('git_commit', ''))[:10])} · profile "
        f"{_e(info.get('profile') or '-')} · overrides {_e(' '.join(info.get('overrides') or []) or '-')}"
    )
    body = [
        f"<h1>{_e(info.get('experiment', run.path.name))}</h1><p class='sub'>{sub}</p>",
        f"<p>{_e(info.get('document', {}).get('description', ''))}</p>",
        _cluster_warning(info),
        f"<h2>Summary {badge}</h2>",
        _capacity(run, plot_dir),
        _summary(trials, run.axes) if not trials.empty else "<p>No trial recorded.</p>",
        _endpoints(run) if not trials.empty else "",
        _thresholds(run) if not trials.empty else "",
        _kernel_tcp(trials, run.axes) if not trials.empty else "",
        _host_check(info),
        _profiles(run, out),
        "<h2>Figures</h2>",
        "".join(f'<p class="warn">skipped: {_e(n)}</p>' for n in dict.fromkeys(notes)),
        *(_figure(f) for f in figs),
        _models(table, what_if),
        _history(run, plot_dir, notes),
        "<h2>Configuration and host</h2><details><summary>run.json</summary>"
        f"<pre>{_e(json.dumps(info, indent=1, default=str))}</pre></details>",
    ]
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>perfctl report: {_e(info.get('experiment', ''))}</title>"
        f"<style>{CSS}</style></head><body>{''.join(body)}<script>{SCRIPT}</script>"
        "</body></html>"
    )
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out
