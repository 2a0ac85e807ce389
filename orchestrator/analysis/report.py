"""`perfctl report RUN_DIR`: one self-contained RUN_DIR/report.html.

Every figure is embedded as a base64 PNG (the SVGs stay in plots/ beside it); the page loads
nothing from anywhere else. Sections: with `search:`, the capacity per cell and its figure; the
summary table, the endpoints of a mix, threshold verdicts when the experiment has thresholds,
the kernel's TCP counters per cell and the host's own figures (report_tables.py), the servers'
profiles, the figures, the models table (fitted in memory), the run's history (its
experiment's series and change points, when the run is in its history store), and the run's
configuration and host (run.json).

A small inline script sets <body data-figures="ok"> once every image has decoded with a
non-zero size ("failed:N" otherwise); tests read it from a headless browser's DOM.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd

from .. import results
from ..errors import PerfctlError
from ..history import add, figure, record, trend
from ..history.store import Store
from . import flamegraph, queueing
from .draw_pool import draw_all
from .figures import Figure
from .model_figures import draw_models
from .report_tables import (
    _e,
    _endpoints,
    _host_check,
    _kernel_tcp,
    _models,
    _num,
    _summary,
    _thresholds,
)
from .run_figures import run_figure_calls
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


def _cluster_warning(info: dict) -> str:
    """run.json's cluster warning (an insecure cluster: plain TCP), in the report's head."""
    cluster = info.get("cluster")
    warning = cluster.get("warning") if isinstance(cluster, dict) else None
    return f'<p class="warn">cluster: {_e(warning)}</p>' if warning else ""


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
    calls = run_figure_calls(run, plot_dir, notes)
    try:
        table = queueing.queueing_table(run, notes)
    except (ValueError, KeyError) as e:
        notes.append(f"models: not fitted ({type(e).__name__}: {e})")
        table = pd.DataFrame()
    what_if = run.models.get("what_if") if isinstance(run.models, dict) else None
    changes = (what_if or {}).get("changes")
    # the run's figures and the models' (one call: a list of them), each drawn on its own CPU
    calls.append((lambda: draw_models(run, table, plot_dir, changes), 3.0))
    drawn = draw_all([c for c, _ in calls], [cost for _, cost in calls])
    figs = [f for f in drawn[:-1] if f is not None] + drawn[-1]
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
