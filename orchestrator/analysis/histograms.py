"""A run's latency distributions from its HdrHistograms, never from its request rows: what
compare, the models and the report use, so they work on runs larger than memory and on runs
that kept no requests (`load.records: none`).

Each trial's digest.json (loadgen/digest.py) holds its measured window's histograms (latency,
send-to-done, Server-Timing svc/queue and the overhead beside them) and exact counts and sums.
A cell's distribution over several trials is their histograms added, never their percentiles
averaged. Percentiles read from them are within 0.1% (hdr.py); means are exact (sums).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pandas as pd
import pyarrow.parquet as pq

from loadgen import digest, hdr
from loadgen.records import stream_batches
from models import parameters
from models.parameters import ServiceEstimate, ok_only
from models.verdict import Sample

from ..results import Run, read_summary, trial_dir


@dataclass
class CellDistribution:
    """The measured windows of some trials of one cell, added up."""

    trials: int = 0
    completed: int = 0
    latency_sum_ns: float = 0.0
    sent_to_done_sum_ns: float = 0.0
    window: digest.Window | None = None
    latency_samples: list = field(default_factory=list)  # per trial (with samples=True)
    service_samples: list = field(default_factory=list)

    @property
    def latency(self):
        return self.window.hists["latency"] if self.window else hdr.new()

    @property
    def latency_mean_ms(self) -> float:
        return self.latency_sum_ns / self.completed / 1e6 if self.completed else math.nan

    def latency_percentile_ms(self, q: float) -> float:
        return hdr.percentile_ms(self.latency, q)


def trial_window(run: Run, cell_id: str, trial: int) -> digest.Window | None:
    """The measured window of one trial's digest; a trial written before digests existed
    gets one from its requests.parquet. None when the trial has neither (it failed before
    load ran, or its files are gone) or they do not read (a driver that wrote garbage)."""
    try:
        return _trial_window(run, cell_id, trial)
    except (OSError, ValueError, KeyError):  # pyarrow's and json's errors are ValueErrors
        return None


def _trial_window(run: Run, cell_id: str, trial: int) -> digest.Window | None:
    tdir = trial_dir(run.path, cell_id, int(trial))
    summary = read_summary(tdir)
    if not (tdir / "digest.json").is_file():
        return _window_from_rows(tdir, summary)
    doc = digest.read(tdir / "digest.json")
    summary = summary or {"measure_start_ns": None}
    for w in doc["windows"]:
        if w.measure_start_ns == summary["measure_start_ns"]:
            return w
    return doc["windows"][-1] if doc["windows"] else None


def _window_from_rows(tdir, summary: dict | None) -> digest.Window | None:
    """A trial written before digests existed: its requests.parquet streamed through a
    window, batch by batch."""
    f = tdir / "requests.parquet"
    if summary is None or not f.is_file():
        return None
    w = digest.Window(
        summary.get("start_ns", summary["measure_start_ns"]),
        summary["measure_start_ns"],
        summary["measure_end_ns"],
    )
    for batch in stream_batches(f, batch_size=1 << 20):
        w.add({k: batch.column(k).to_numpy(zero_copy_only=False) for k in batch.schema.names})
    return w


def _sample(h, blocks=None) -> Sample:
    """A histogram (or several, one per block) as a bootstrap sample of values in ms, each
    bucket at its midpoint."""
    out = []
    for g in blocks or [h]:
        idx, counts = hdr.sparse(g)
        if counts.sum() == 0:
            continue
        mid = hdr.value_at_index(g, idx) + (hdr.bucket_width(g, idx) - 1) / 2.0
        out.append((mid / 1e6, counts.astype(float)))
    return Sample(tuple(out))


MIN_BLOCKS = 3  # fewer whole seconds in the window: the window's histogram as one block


def latency_blocks(run: Run, cell_id: str, trial: int, w: digest.Window) -> list:
    """The per-second latency histograms (latency.hlog, by completion second) that lie
    wholly inside the trial's measured window; [] when there are too few."""
    tdir = trial_dir(run.path, cell_id, int(trial))
    summary = read_summary(tdir)
    log = tdir / "latency.hlog"
    if summary is None or not log.is_file() or "start_ns" not in summary:
        return []
    first = math.ceil((w.measure_start_ns - summary["start_ns"]) / digest.BIN_NS)
    last = math.floor((w.measure_end_ns - summary["start_ns"]) / digest.BIN_NS)
    try:
        hs = [h for k, h in enumerate(hdr.iter_log(log)) if first <= k < last]
    except (OSError, ValueError):
        return []
    hs = [h for h in hs if h.total_count]
    return hs if len(hs) >= MIN_BLOCKS else []


def cell_distributions(
    run: Run, trials: pd.DataFrame, samples: bool = False
) -> dict[str, CellDistribution]:
    """cell_id -> the added windows of the given trials (cells without any digest left out).
    One trial's histograms are in memory at a time, plus one running sum per cell. samples:
    keep each trial's latency (per second of its window, when its log has them) and svc
    histograms as bootstrap samples (models/verdict.py) too."""
    out: dict[str, CellDistribution] = {}
    for cid, k in zip(trials["cell_id"], trials["trial"]):
        w = trial_window(run, cid, int(k))
        if w is None:
            continue
        d = out.setdefault(cid, CellDistribution())
        if samples and w.counts["completed"]:
            d.latency_samples.append(
                _sample(w.hists["latency"], latency_blocks(run, cid, int(k), w))
            )
            if w.hists["svc"].total_count >= 2:
                d.service_samples.append(_sample(w.hists["svc"]))
        d.trials += 1
        d.completed += w.counts["completed"]
        d.latency_sum_ns += w.sums["latency_sum_ns"]
        d.sent_to_done_sum_ns += w.sums["sent_to_done_sum_ns"]
        if d.window is None:
            d.window = w
        else:
            d.window.merge(w)
    return out


def has_distributions(run: Run, trials: pd.DataFrame) -> bool:
    """True when any of the trials has a digest with a completed request."""
    return any(
        (w := trial_window(run, c, k)) is not None and w.counts["completed"] > 0
        for c, k in zip(trials["cell_id"], trials["trial"])
    )


def service_from_histograms(d: CellDistribution) -> ServiceEstimate | None:
    """The queueing models' service estimate from a cell's Server-Timing sums and
    histograms, as models.parameters.estimate_service computes it from rows: mean and SCV of
    svc from exact sums; the overhead (latency - svc - queue) as its exact mean and its
    median from the histogram; the database's share from the `db` sums. What is lost without rows: the one-worker gap
    (parameters.worker_gap needs completions in order), taken as 0. None without svc."""
    if d.window is None:
        return None
    s = d.window.sums
    n = s["svc_n"]
    if n < 2:
        return None
    mean_ms = s["svc_sum_ms"] / n
    var_ms2 = max((s["svc_sumsq_ms2"] - n * mean_ms**2) / (n - 1), 0.0)
    if mean_ms <= 0:
        return None
    over_h = d.window.hists["overhead"]
    over_median = hdr.percentile_ms(over_h, 50.0) if over_h.total_count else 0.0
    over_mean = s["overhead_sum_ms"] / s["overhead_n"] if s["overhead_n"] else 0.0
    # db time per request over the requests with svc (those without db_ms spent none there)
    db_ms = s.get("db_sum_ms", 0.0) / n if s.get("db_n", 0.0) > 0 else math.nan
    se_ms = math.sqrt(var_ms2 / n)
    trial_means = [
        sum(float((v * c).sum()) for v, c in smp.blocks)
        / sum(float(c.sum()) for _, c in smp.blocks)
        for smp in d.service_samples
        if smp.blocks
    ]
    if len(trial_means) >= 2:
        m = sum(trial_means) / len(trial_means)
        spread = math.sqrt(sum((x - m) ** 2 for x in trial_means) / (len(trial_means) - 1))
        se_ms = max(se_ms, spread / math.sqrt(len(trial_means)))
    over_se_ms = floor_ms = math.nan
    if over_h.total_count >= 2:
        over_se_ms = hdr.mean_std_ms(over_h)[1] / math.sqrt(over_h.total_count)
        floor_ms = hdr.percentile_ms(over_h, parameters.FLOOR_PERCENTILE)
    return ServiceEstimate(
        mean_ms / 1e3,
        var_ms2 / mean_ms**2,
        "server_timing",
        max(over_median, 0.0) / 1e3,
        int(n),
        max(over_mean, 0.0) / 1e3,
        0.0,
        min(db_ms, mean_ms) / 1e3 if db_ms == db_ms else math.nan,
        mean_se_s=se_ms / 1e3,
        overhead_se_s=over_se_ms / 1e3,
        overhead_floor_s=max(floor_ms, 0.0) / 1e3,
    )


def single_user_service(d: CellDistribution) -> ServiceEstimate | None:
    """The service time of a one-connection closed cell, from its send-to-done histogram:
    the mean is exact (sums), the SCV from the histogram's buckets (within 0.1%)."""
    if d.window is None or d.completed < 2:
        return None
    mean_ms = d.sent_to_done_sum_ns / d.completed / 1e6
    _, std_ms = hdr.mean_std_ms(d.window.hists["sent_to_done"])
    if not mean_ms > 0:
        return None
    return ServiceEstimate(
        mean_ms / 1e3, (std_ms / mean_ms) ** 2, "single_user_latency", 0.0, int(d.completed)
    )


GAP_ROWS = 200_000  # rows per trial read for the one-worker gap (a contiguous stretch)


def worker_gap_from_rows(
    run: Run, cell_id: str, trials: list[int], max_rows: int = GAP_ROWS
) -> float:
    """models.parameters.worker_gap over the first max_rows measured requests of each trial
    that kept its rows (0 when none did): a bounded read, as the gap needs completions in
    order, which no histogram holds."""
    frames = []
    for k in trials:
        tdir = trial_dir(run.path, cell_id, int(k))
        summary = read_summary(tdir)
        if summary is None or not (tdir / "requests.parquet").is_file():
            continue
        got, n = [], 0
        f = pq.ParquetFile(tdir / "requests.parquet")
        if "svc_ms" not in f.schema_arrow.names:
            continue
        for batch in stream_batches(
            tdir / "requests.parquet",
            ["intended_ns", "done_ns", "error", "status", "svc_ms", "queue_ms"],
            65_536,
        ):
            df = batch.to_pandas()
            df = df[
                (df["intended_ns"] >= summary["measure_start_ns"])
                & (df["intended_ns"] < summary["measure_end_ns"])
            ]
            got.append(df)
            n += len(df)
            if n >= max_rows:
                break
        if got:
            df = ok_only(pd.concat(got, ignore_index=True).iloc[:max_rows])
            frames.append(df.assign(cell_id=cell_id, trial=int(k)))
    if not frames:
        return 0.0
    return parameters.worker_gap(pd.concat(frames, ignore_index=True))


def cell_measures(run: Run, trials: pd.DataFrame) -> dict[str, dict]:
    """models.comparison.compare's `measures`: per cell, the pooled measured mean (exact)
    and p99 (HDR), service estimates from histograms (a one-worker server's gap from a
    bounded stretch of rows, when rows were kept), and per trial the bootstrap samples of
    the latency and of svc (models/verdict.py)."""
    out = {}
    firsts = trials.drop_duplicates("cell_id").set_index("cell_id")
    for cid, d in cell_distributions(run, trials, samples=True).items():
        if not d.completed:
            continue
        svc = service_from_histograms(d)
        if svc is not None and parameters.threads_cores(firsts.loc[cid])[0] == 1:
            gap = worker_gap_from_rows(
                run, cid, list(trials.loc[trials["cell_id"] == cid, "trial"])
            )
            if gap > 0:
                mean = svc.mean_s + gap
                svc = replace(svc, mean_s=mean, scv=svc.scv * (svc.mean_s / mean) ** 2, gap_s=gap)
        out[cid] = {
            "mean_ms": d.latency_mean_ms,
            "p99_ms": d.latency_percentile_ms(99.0),
            "service": svc,
            "single_user_service": single_user_service(d),
            "latency_samples": d.latency_samples,
            "service_samples": d.service_samples or None,
        }
    return out
