"""The summary table `perfctl run` (and `perfctl.run()`) prints after the last trial, sized to
the console.

Numbers are never cut: each number column is as wide as its widest value (numbers.fmt's
compact form: `1.2k`, `0.412`), and when the table does not fit the console, whole columns are left out,
least important first (the note under the table names them); a wider terminal shows more
(p90, p99.9, server CPU, listen-queue overflows). An axis that only sets the arrival rate
(`rate: "{rate}"` under `load:`) shows `-` in closed-load and burst rows, which ignore it.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..analysis import reasons
from ..analysis.views import flag
from ..experiment.document import placeholders
from ..numbers import fmt

RATE_KEYS = ("rate",)  # load: keys only open and ramp load read
RATELESS_MODES = {"closed", "burst"}
MAX_ENDPOINT_NOTES = 8  # lines under the per-endpoint table saying why an endpoint is not valid


def rate_only_axes(document: dict | None, axes: list[str]) -> set[str]:
    """Axes whose placeholder appears in the document only under load.rate: a closed-load
    cell ignores them, so its row shows no value there."""
    if not document:
        return set()
    load = document.get("load") or {}
    in_rate = placeholders({k: v for k, v in load.items() if k in RATE_KEYS})
    rest = {
        k: v
        for k, v in document.items()
        if k not in ("load", "matrix", "exclude", "include", "profiles")
    }
    rest["load"] = {k: v for k, v in load.items() if k not in RATE_KEYS}
    elsewhere = placeholders(rest)
    return {a for a in axes if a in in_rate and a not in elsewhere}


@dataclass
class Column:
    header: str
    values: Callable[[pd.DataFrame, pd.DataFrame], str]  # (the cell's trials, usable) -> text
    priority: int  # lower: kept longer when the terminal is narrow
    wide_only: bool = False  # shown only when there is room to spare


def _mean(col: str) -> Callable:
    return lambda g, use: fmt(use[col].mean()) if col in use else "-"


def _columns(trials: pd.DataFrame) -> list[Column]:
    cols = [
        Column("trials", lambda g, use: str(len(g)), 7),
        Column("req/s", _mean("throughput_rps"), 1),
        Column("p50", _mean("latency_p50_ms"), 3),
        Column("p90", _mean("latency_p90_ms"), 20, wide_only=True),
        Column("p99", _mean("latency_p99_ms"), 0),
        Column("p99.9", _mean("latency_p999_ms"), 21, wide_only=True),
        Column("max", _mean("latency_max_ms"), 8),
        Column("errors", lambda g, use: fmt(g["errors"].sum()) if "errors" in g else "-", 2),
        Column("valid", lambda g, use: f"{int(flag(g, 'valid').sum())}/{len(g)}", 4),
        Column("quiet", lambda g, use: _quiet(g), 5),
        Column("cpu%", _mean("server_cpu_pct"), 22, wide_only=True),
    ]
    if "tcp_listen_overflows" in trials and (trials["tcp_listen_overflows"].fillna(0) > 0).any():
        cols.append(Column("overflows", _mean("tcp_listen_overflows"), 9))
    if "precision_reached" in trials:
        cols.append(Column("precision", lambda g, use: _precision(g.iloc[-1]), 6))
    return cols


def _quiet(g: pd.DataFrame) -> str:
    q = flag(g, "quiet")
    text = f"{int(q.sum())}/{len(g)}"
    return text if q.all() else f"[yellow]{text}[/]"


def _precision(last) -> str:
    """A cell's precision after its last trial: "±3.1% ok", or what is missing."""
    half, target = last["precision_half_width_pct"], last["precision_target_pct"]
    if bool(last["precision_reached"]):
        return f"±{half:.1f}% ok"
    if half != half:
        return f"[yellow]- ({int(last['precision_trials'])} usable; 6 needed)[/]"
    return f"[yellow]±{half:.1f}% > {target:g}%[/]"


def _table(rows: list[tuple[list[str], str | None]], axes: list[str], cols: list[Column]) -> Table:
    t = Table(
        title="Summary: mean over valid trials; latency in ms",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    for a in axes:
        t.add_column(a, overflow="fold")
    for c in cols:
        t.add_column(c.header, justify="right", no_wrap=True, overflow="ignore")
    for cells, style in rows:
        t.add_row(*cells, style=style)
    return t


def _natural_width(table: Table) -> int:
    """The table's width with nothing cut or wrapped: rendered on a very wide console."""
    wide = Console(
        width=10_000,
        file=io.StringIO(),
        color_system=None,
        legacy_windows=False,
        force_jupyter=False,  # a measurement: never an output cell of its own in a notebook
    )
    with wide.capture() as cap:
        wide.print(table)
    return max((len(line.rstrip()) for line in cap.get().splitlines()), default=0)


def summary_table(
    trials: pd.DataFrame, axes: list[str], width: int, document: dict | None = None
) -> Group:
    """The per-cell summary for a console `width` columns wide, which trials were noisy and
    why, and which columns were left out for lack of room."""
    all_cols = _columns(trials)
    rateless = rate_only_axes(document, axes)
    groups = list(trials.groupby("cell_id", sort=False))
    notes: list[Text] = []

    # Every cell's text once, for every column; the fitting below only picks columns.
    rows: list[tuple[list[str], dict[str, str], str | None]] = []
    for _, g in groups:
        valid = flag(g, "valid")
        use = g[valid] if valid.any() else g
        mode = str(g["load_mode"].iloc[0]) if "load_mode" in g else ""
        axis_cells = [
            "-" if a in rateless and mode in RATELESS_MODES else str(g[a].iloc[0]) for a in axes
        ]
        rows.append(
            (
                axis_cells,
                {c.header: c.values(g, use) for c in all_cols},
                None if valid.all() else "red",
            )
        )

    def rows_for(cols: list[Column], sample: bool = False):
        chosen = rows
        if sample:  # the widest text of each column is all a width needs
            chosen = [
                max(rows, key=lambda r: Text.from_markup(r[0][i]).cell_len)
                for i in range(len(axes))
            ]
            chosen += [
                max(rows, key=lambda r: Text.from_markup(r[1][c.header]).cell_len) for c in cols
            ]
        return [
            (axis_cells + [vals[c.header] for c in cols], style)
            for axis_cells, vals, style in chosen
        ]

    kept = list(all_cols)
    while kept and _natural_width(_table(rows_for(kept, sample=True), axes, kept)) > width:
        kept.remove(max(kept, key=lambda c: c.priority))  # least important first
    ordered = [c for c in all_cols if c in kept]
    table = _table(rows_for(ordered), axes, ordered)
    left_out = [c.header for c in all_cols if c not in kept and not c.wide_only]
    if left_out:
        notes.append(
            Text(
                f"left out for width: {', '.join(left_out)} (a wider terminal, or "
                "trials.csv, has them)",
                style="dim",
            )
        )
    if rateless and any(
        str(g["load_mode"].iloc[0]) in RATELESS_MODES for _, g in groups if "load_mode" in g
    ):
        notes.append(
            Text(
                f"-: {', '.join(sorted(rateless))} sets the arrival rate, which "
                "closed and burst load do not use",
                style="dim",
            )
        )
    notes += [line for _, g in groups for line in _from_send_lines(g, axes)]
    why = [w for _, g in groups for w in _noisy_lines(g, axes)]
    notes += why
    if why:
        notes.append(
            Text(
                "valid: the measurement worked; quiet: the host left the trial alone. "
                "compare and check use valid, quiet trials only (docs/valid-and-quiet.md)."
            )
        )
    return Group(table, *notes)


def _from_send_lines(g: pd.DataFrame, axes: list[str]) -> list[Text]:
    """Which of a cell's trials report their latency from each request's actual send (what
    the server saw: loadgen/validity.py), and the intended-time p99 beside it."""
    if "figures_from" not in g:
        return []
    sent = g[g["figures_from"].astype(str) == "send"]
    if sent.empty:
        return []
    label = ", ".join(f"{a}={g[a].iloc[0]}" for a in axes)
    which = ", ".join(f"#{t}" for t in sent["trial"])
    intended = sent.get("latency_p99_intended_ms", pd.Series(dtype=float))
    beside = (
        f" (p99 from the intended time: {intended.min():.3g}-{intended.max():.3g} ms)"
        if intended.notna().any()
        else ""
    )
    return [
        Text.assemble(
            ("from the send", "cyan"),
            f" {label} {which}: latency measured from each actual send{beside}: the "
            "generator's lateness did not depend on the server, so the server saw the "
            "Poisson arrivals asked for (trials.csv figures_why)",
        )
    ]


def _noisy_lines(g: pd.DataFrame, axes: list[str]) -> list[Text]:
    """Why a cell's noisy trials were noisy, each reason once (analysis/reasons.py):
    "noisy rate=600 #1, #2: CPU steal x2: 6.1–9.0% > 5%", or a line per reason under it."""
    quiet = flag(g, "quiet")
    if quiet.all():
        return []
    noisy = g[~quiet]
    label = ", ".join(f"{a}={g[a].iloc[0]}" for a in axes)
    which = ", ".join(f"#{t}" for t in noisy["trial"])
    lines = reasons.lines(noisy.get("noise_reasons", pd.Series("", index=noisy.index)))
    head = Text.assemble(("noisy", "yellow"), f" {label} {which}:")
    if len(lines) == 1:
        return [head.append(f" {lines[0]}")]
    return [head, *(Text(f"  {line}") for line in lines)]


def endpoint_table(endpoints: pd.DataFrame, axes: list[str]) -> Group | None:
    """Per cell and endpoint, when a cell's workload is a mix (run.endpoints): each request's
    share, throughput, latency and errors, the mean over its valid trials (all trials when
    none is valid), and how many of its trials it was valid in. None without a mix."""
    if endpoints.empty or endpoints.groupby("cell_id")["endpoint"].nunique().max() < 2:
        return None
    t = Table(
        title="Per endpoint: mean over valid trials; latency in ms",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    shown = [a for a in axes if a in endpoints]
    for a in [*shown, "endpoint"]:
        t.add_column(a, overflow="fold")
    heads = ("share", "req/s", "p50", "p90", "p99", "errors", "error%", "valid")
    for h in heads:
        t.add_column(h, justify="right", no_wrap=True)
    notes: list[str] = []
    for (_, name), g in endpoints.groupby(["cell_id", "endpoint"], sort=False):
        valid = flag(g, "valid")
        use = g[valid] if valid.any() else g
        t.add_row(
            *[str(g[a].iloc[0]) for a in shown],
            str(name),
            f"{100 * use['share'].mean():.1f}%",
            fmt(use["throughput_rps"].mean()),
            fmt(use["latency_p50_ms"].mean()),
            fmt(use["latency_p90_ms"].mean()),
            fmt(use["latency_p99_ms"].mean()),
            fmt(g["errors"].sum()),
            f"{100 * use['error_rate'].mean():.3g}",
            f"{int(valid.sum())}/{len(g)}",
            style=None if valid.all() else "red",
        )
        where = ", ".join(f"{a}={g[a].iloc[0]}" for a in shown)
        for r in dict.fromkeys(g["validity"]):
            r = r.removeprefix("the trial is invalid").removeprefix("; ")
            if r:
                notes.append(f"{where + ', ' if where else ''}{name}: {r}")
    lines = [Text(n, "dim") for n in notes[:MAX_ENDPOINT_NOTES]]
    if len(notes) > MAX_ENDPOINT_NOTES:
        more = len(notes) - MAX_ENDPOINT_NOTES
        lines.append(Text(f"... and {more} more (each trial's endpoints.csv)", "dim"))
    return Group(t, *lines)


def capacity_table(doc: dict, axes: list[str]) -> Group:
    """The searched capacity per cell (capacity.json): the capacity and its interval, how
    precise it is, the trials and wall time it took; under it, the probes left out and why."""
    slo = doc["search"]["slo"]
    t = Table(
        title=f"Capacity under the SLO: {slo['stat']} <= {slo['latency_ms']:g} ms, errors <= "
        f"{100 * slo['error_rate']:g}%",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    shown = list(axes)
    for a in shown:
        t.add_column(a, overflow="fold")
    for h in ("capacity", "interval", "±", "probes", "trials", "wall"):
        t.add_column(h, justify="right", no_wrap=True)
    t.add_column("stopped", overflow="fold")
    notes: list[Text] = []
    for c in doc["cells"]:
        unit = "/s" if c["unit"] == "rate_rps" else " users"
        cap, lo, hi = c["capacity"], c["low"], c["high"]
        interval = f"{fmt(lo)}-{fmt(hi)}" if lo == lo and hi == hi else "-"
        half = c.get("half_width_pct", float("nan"))
        ok = bool(c.get("precision_reached"))
        pm = "-" if half != half else f"{half:.1f}%" if ok else f"[yellow]{half:.1f}%[/]"
        style = None if c["status"] == "found" else "yellow" if c["status"] != "failed" else "red"
        t.add_row(
            *[str(c["values"].get(a, "")) for a in shown],
            f"{fmt(cap)}{unit}" if cap == cap else "-",
            interval,
            pm,
            str(c.get("knee_probes", 0)),
            str(c["trials"]),
            f"{c['wall_s']:.0f}s",
            str(c.get("stopped", "")),
            style=style,
        )
        for p in c["probes"]:
            if not p["used"]:
                notes.append(
                    Text(f"{c['label']} trial {p['trial']} ({p['role']}): {p['verdict']}", "dim")
                )
    if any(not bool(c.get("precision_reached")) for c in doc["cells"]):
        notes.append(
            Text(
                f"±: the interval's half-width; yellow: above the precision asked for "
                f"({100 * doc['search']['precision']:g}%). capacity.json has every probe.",
                style="dim",
            )
        )
    return Group(t, *notes)
