"""The series of a history store, their change points, and the verdict of `history check`.

A series is one (experiment, cell, metric, host fingerprint): the runs of that cell on that
host, oldest first, each with the values of its usable trials (valid and quiet; valid only
with include_noisy). A run with no usable trial in the cell is left out of the series.
Metrics: throughput (throughput_rps, higher is better), p50 and p99 (latency_*_ms, lower is
better), error_rate (lower is better) and capacity (the searched capacity, one value per run,
higher is better).

`history check` judges the newest `window` runs of every series on the host of the newest run:
- regression (exit 1): the latest change point moved the metric the wrong way by more than
  the tolerance (the ratio of medians, after / before);
- thin (exit 3): fewer than 2 x min_runs runs to judge, or the newest runs (fewer than
  min_runs, too few to make a change point) sit beyond the tolerance the wrong way from the
  runs before them: a regression perhaps, not yet evidence;
- ok (exit 0) otherwise. One regression anywhere makes the exit 1; else one thin series 3.
When the newest run was recorded with a host calibration (`perfctl calibrate`), each verdict
ends with the run-to-run and trial-to-trial spreads it measured for the metric: the host's own
yardstick for the size of a change. The verdict itself comes from the series alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import PerfctlError
from . import changepoints as cp

# name -> (column, +1 when higher is better, unit)
METRICS = {
    "throughput": ("throughput_rps", +1, "req/s"),
    "p50": ("latency_p50_ms", -1, "ms"),
    "p99": ("latency_p99_ms", -1, "ms"),
    "error_rate": ("error_rate", -1, ""),
    "capacity": ("capacity", +1, ""),
}
CHECK_METRICS = ("throughput", "p99", "capacity")
WINDOW = 40
TOLERANCE = 0.05


@dataclass
class Series:
    experiment: str
    cell_id: str
    cell_label: str
    metric: str
    host_fingerprint: str
    run_ids: list[str]
    started: list[str]
    commits: list[str | None]
    values: list[np.ndarray]
    change_points: list[cp.ChangePoint] = field(default_factory=list)

    @property
    def direction(self) -> int:
        return METRICS[self.metric][1]

    @property
    def unit(self) -> str:
        return METRICS[self.metric][2]

    @property
    def name(self) -> str:
        return f"{self.experiment} / {self.cell_label} / {self.metric}"

    def tail(self, window: int | None) -> Series:
        if window is None or len(self.run_ids) <= window:
            return self
        s = slice(len(self.run_ids) - window, None)
        return Series(
            self.experiment,
            self.cell_id,
            self.cell_label,
            self.metric,
            self.host_fingerprint,
            self.run_ids[s],
            self.started[s],
            self.commits[s],
            self.values[s],
        )

    def medians(self) -> np.ndarray:
        return np.array([float(np.median(v)) for v in self.values])

    def commit_range(self, index: int) -> str:
        """The commits between the last run before `index` and the run at it, as git writes a
        range (OLD..NEW: the commits after OLD up to NEW)."""
        old = self.commits[index - 1] if index > 0 else None
        new = self.commits[index]
        if not old and not new:
            return "unknown commits (give perfctl run --commit, or history.git)"
        return f"{(old or '?')[:12]}..{(new or '?')[:12]}"


def check_metric(name: str) -> str:
    if name not in METRICS:
        raise PerfctlError(
            f"--metric {name}: no such metric in the history. Fix: one of {', '.join(METRICS)}."
        )
    return name


def trials_frame(store, experiment: str | None = None) -> pd.DataFrame:
    """Every trial in the store with its run's columns (the notebook view)."""
    names, rows = store.trials_table(experiment)
    df = pd.DataFrame.from_records(rows, columns=names)
    if df.empty:
        return df
    df["started"] = pd.to_datetime(df["started"], utc=True, errors="coerce")
    for c in ("valid", "quiet"):
        df[c] = df[c].astype(bool)
    return df


def build_series(
    store,
    experiment: str | None = None,
    metrics: tuple[str, ...] = CHECK_METRICS,
    cells: list[str] | None = None,
    include_noisy: bool = False,
) -> list[Series]:
    """Every series of the store (of one experiment, of some cells: cell id or label), for
    `metrics`, oldest run first."""
    out: list[Series] = []
    trial_metrics = [m for m in metrics if m != "capacity"]
    if trial_metrics:
        names, tuples = store.trials_table(experiment)
        rows = pd.DataFrame.from_records(tuples, columns=names)
        if not rows.empty:
            usable = rows["valid"].astype(bool)
            if not include_noisy:
                usable &= rows["quiet"].astype(bool)
            out += _series_of(rows[usable], trial_metrics, cells)
    if "capacity" in metrics:
        rows = pd.DataFrame(store.capacities(experiment))
        if not rows.empty:
            out += _series_of(rows[rows["found"].astype(bool)], ["capacity"], cells)
    return out


def _series_of(rows: pd.DataFrame, metrics: list[str], cells: list[str] | None) -> list[Series]:
    if cells:
        rows = rows[rows["cell_id"].isin(cells) | rows["cell_label"].isin(cells)]
    out = []
    keys = ["experiment", "cell_id", "host_fingerprint"]
    for (exp, cell, host), g in rows.groupby(keys, sort=True):
        label = str(g["cell_label"].iloc[-1])
        for m in metrics:
            col = METRICS[m][0]
            g2 = g[np.isfinite(pd.to_numeric(g[col], errors="coerce").astype(float))]
            if g2.empty:
                continue
            g2 = g2.sort_values(["started", "run_id"], kind="stable")
            run_ids = g2["run_id"].to_numpy()
            first = np.flatnonzero(np.r_[True, run_ids[1:] != run_ids[:-1]])
            ids = list(run_ids[first])
            started = list(g2["started"].to_numpy()[first])
            commits = list(g2["commit_sha"].to_numpy()[first])
            values = np.split(g2[col].to_numpy(dtype=float), first[1:])
            out.append(Series(exp, cell, label, m, host, ids, started, commits, values))
    return out


def detect(series: Series, min_runs: int = cp.MIN_RUNS, alpha: float = cp.ALPHA) -> Series:
    series.change_points = cp.detect(series.values, min_runs=min_runs, alpha=alpha)
    return series


@dataclass
class Verdict:
    series: Series
    status: str  # regression | thin | ok
    text: str
    change_point: cp.ChangePoint | None = None

    @property
    def exit_code(self) -> int:
        return {"regression": 1, "thin": 3}.get(self.status, 0)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def judge(
    series: Series,
    tolerance: float = TOLERANCE,
    window: int | None = WINDOW,
    min_runs: int = cp.MIN_RUNS,
    alpha: float = cp.ALPHA,
) -> Verdict:
    """One series' verdict for `history check` (module docstring)."""
    s = detect(series.tail(window), min_runs, alpha)
    n = len(s.run_ids)
    where = f"experiment {s.experiment}, cell {s.cell_label}, metric {s.metric}"
    if n < 2 * min_runs:
        return Verdict(
            s,
            "thin",
            f"{where}: only {n} usable run(s) on this host, and a change point needs "
            f"{min_runs} runs on each side ({2 * min_runs} in all): too thin to judge. More "
            "runs (or --include-noisy, if trials are valid but noisy) give the evidence.",
        )
    if s.change_points:
        c = s.change_points[-1]
        worse = c.change * s.direction < 0
        if worse and abs(c.change) > tolerance:
            since = n - c.index
            return Verdict(
                s,
                "regression",
                f"{where}: a regression of {_pct(c.change)} (95% interval "
                f"{_pct(c.ratio_low - 1)} to {_pct(c.ratio_high - 1)}, p={c.p_value:.3g}) "
                f"beyond the {tolerance:.0%} tolerance, first in run {s.run_ids[c.index]} "
                f"(started {s.started[c.index]}), commits {s.commit_range(c.index)}; the "
                f"newest {since} run(s) sit after it.",
                c,
            )
    start = s.change_points[-1].index if s.change_points else 0
    k = min_runs - 1
    med = s.medians()
    ref = np.concatenate(s.values[start : n - k]) if n - k > start else np.array([])
    if ref.size and k > 0:
        tail = np.concatenate(s.values[n - k :])
        change = float(np.median(tail) / np.median(ref) - 1) if np.median(ref) else 0.0
        if change * s.direction < 0 and abs(change) > tolerance:
            return Verdict(
                s,
                "thin",
                f"{where}: the newest {k} run(s) are {_pct(change)} from the {n - k - start} "
                f"before them (beyond the {tolerance:.0%} tolerance, commits "
                f"{s.commit_range(n - k)}), but a change point needs {min_runs} runs after "
                "it: too thin to call a regression yet. Run again to confirm.",
            )
    last = s.change_points[-1] if s.change_points else None
    latest = (
        f"its latest change point, {_pct(last.change)} at commits "
        f"{s.commit_range(last.index)}, is within the tolerance or an improvement"
        if last
        else "no change point"
    )
    return Verdict(
        s,
        "ok",
        f"{where}: no regression beyond {tolerance:.0%} over the newest {n} runs "
        f"(median {med[-1]:.4g} {s.unit}); {latest}.",
        last,
    )


def check(
    store,
    experiment: str | None = None,
    metrics: tuple[str, ...] = CHECK_METRICS,
    cells: list[str] | None = None,
    tolerance: float = TOLERANCE,
    window: int | None = WINDOW,
    include_noisy: bool = False,
    min_runs: int = cp.MIN_RUNS,
) -> list[Verdict]:
    """The verdict of every series on the host of each experiment's newest run."""
    all_series = build_series(store, experiment, metrics, cells, include_noisy)
    newest: dict[str, tuple[str, str]] = {}
    for s in all_series:
        last = (s.started[-1], s.host_fingerprint)
        newest[s.experiment] = max(newest.get(s.experiment, last), last)
    verdicts = [
        judge(s, tolerance, window, min_runs)
        for s in all_series
        if s.host_fingerprint == newest[s.experiment][1]
    ]
    hosts: dict[str, dict] = {}
    for v in verdicts:
        run_id = v.series.run_ids[-1]
        if run_id not in hosts:
            hosts[run_id] = store.host(run_id)
        v.text += calibration_note(hosts[run_id], v.series.metric)
    return verdicts


def calibration_note(host: dict, metric: str) -> str:
    """What the host's calibration (perfctl calibrate, recorded with the newest run) says of
    the metric's noise: the yardstick to read a change's size against. "" without one."""
    spreads = ((host.get("calibration") or {}).get("metrics") or {}).get(METRICS[metric][0])
    if not isinstance(spreads, dict):
        return ""
    run_cv, trial_cv = spreads.get("run_cv"), spreads.get("trial_cv")
    if not isinstance(run_cv, (int, float)) or not isinstance(trial_cv, (int, float)):
        return ""
    if not (math.isfinite(run_cv) and math.isfinite(trial_cv)):
        return ""
    created = host["calibration"].get("created") or "?"
    return (
        f" This host's calibration ({created}) puts A/A runs {run_cv:.1%} apart and trials "
        f"{trial_cv:.1%} apart for this metric."
    )


def exit_code(verdicts: list[Verdict]) -> int:
    codes = {v.exit_code for v in verdicts}
    return 1 if 1 in codes else 3 if 3 in codes else 0
