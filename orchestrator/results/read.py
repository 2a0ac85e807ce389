"""Reading a run back for analysis: `load(path)` gives a Run, whose DataFrames load on first
use. Notebooks: `from orchestrator import results; run = results.load("results/latest")`; for
runs larger than memory `run.cell_requests(cell_id)` (one cell) and `run.dataset()` (lazy,
pyarrow). A damaged per-trial file is left out and named by `run.damaged()`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import PerfctlError
from .claim import RUN_FILE, trial_dir
from .endpoints import ENDPOINT_COLUMNS, ENDPOINTS_FILE, read_endpoints
from .schema import UNREADABLE, read_summary, read_trials, summary_problem, why_unreadable

MAX_REQUEST_ROWS = 20_000_000  # Run.requests loads at most this many rows (~1.4 GB)


TRIAL_FILES = (
    "summary.json",
    "digest.json",
    "requests.parquet",
    "timeline.parquet",
    "resources.parquet",
    ENDPOINTS_FILE,
)


@dataclass
class Run:
    """A results directory opened for analysis: DataFrames on first use.

    A damaged file (truncated, overwritten) of one trial is left out of what reads it, as if
    missing, and damaged() names it; a damaged run.json or trials table raises PerfctlError
    naming it, since nothing of the run can be told without them."""

    path: Path

    @cached_property
    def info(self) -> dict:
        f = self.path / RUN_FILE
        try:
            info = json.loads(f.read_text())
        except UNREADABLE as e:
            raise _damaged_run_json(f, why_unreadable(e)) from None
        if not isinstance(info, dict) or not isinstance(info.get("axes", []), list):
            raise _damaged_run_json(f, "not a run.json object with a list of axes")
        return info

    def damaged(self) -> list[str]:
        """One line per damaged per-trial file (TRIAL_FILES): which, why, that it is left
        out. Reads each JSON file and each parquet footer."""
        out = []
        for cid, k in zip(self.trials["cell_id"], self.trials["trial"]):
            tdir = trial_dir(self.path, cid, int(k))
            for name in TRIAL_FILES:
                f = tdir / name
                if not f.is_file():
                    continue
                try:
                    if name == "summary.json":
                        problem = summary_problem(json.loads(f.read_text()))
                    elif name.endswith(".json"):
                        problem = (
                            None if isinstance(json.loads(f.read_text()), dict) else "not an object"
                        )
                    elif name == ENDPOINTS_FILE:
                        problem = (
                            None
                            if _endpoints_read(f.parent) is not None
                            else "not an endpoints table"
                        )
                    else:
                        problem = None if _footer_reads(f) else "not a whole parquet file"
                except UNREADABLE as e:
                    problem = why_unreadable(e)
                if problem:
                    out.append(
                        f"{f.relative_to(self.path)} is damaged ({problem}); that trial's "
                        f"{name} is left out"
                    )
        return out

    def _parquet(self, f: Path, columns: list[str] | None = None) -> pd.DataFrame | None:
        """f read whole (or its columns), or None when it is damaged (see damaged())."""
        try:
            return pq.read_table(f, columns=columns).to_pandas()
        except UNREADABLE:
            return None

    @cached_property
    def trials(self) -> pd.DataFrame:
        return read_trials(self.path)

    def _gather(self, name: str) -> pd.DataFrame:
        frames = []
        for _, t in self.trials[["cell_id", "trial"]].iterrows():
            f = trial_dir(self.path, t["cell_id"], int(t["trial"])) / name
            df = self._parquet(f) if f.is_file() else None
            if df is not None:
                df.insert(0, "trial", int(t["trial"]))
                df.insert(0, "cell_id", t["cell_id"])
                frames.append(df)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def _request_files(
        self, cell_id: str | None = None, trial: int | None = None
    ) -> list[tuple[str, int, Path]]:
        out = []
        for cid, k in zip(self.trials["cell_id"], self.trials["trial"]):
            if (cell_id is None or cid == cell_id) and (trial is None or int(k) == int(trial)):
                f = trial_dir(self.path, cid, int(k)) / "requests.parquet"
                if f.is_file() and _footer_reads(f):
                    out.append((cid, int(k), f))
        return out

    def request_rows(self) -> int:
        """How many request rows the run's requests.parquet files hold (from their footers)."""
        return sum(pq.ParquetFile(f).metadata.num_rows for _, _, f in self._request_files())

    def dataset(self, cell_id: str | None = None, trial: int | None = None) -> ds.Dataset:
        """The run's requests (or one cell's, one trial's) as a lazy pyarrow dataset with
        `cell_id` and `trial` columns: nothing is read until it is scanned, and a scan reads
        only the columns and row groups its filter needs, batch by batch. For runs larger
        than memory: `run.dataset().to_batches(columns=[...], filter=...)`, or
        `.to_table(filter=ds.field("cell_id") == c)` for what fits."""
        files = self._request_files(cell_id, trial)
        if not files:
            return ds.dataset(
                pa.table({"cell_id": pa.array([], pa.string()), "trial": pa.array([], pa.int64())})
            )
        schema = pq.read_schema(files[0][2])
        schema = pa.schema([("cell_id", pa.string()), ("trial", pa.int64()), *schema])
        return ds.FileSystemDataset.from_paths(
            [str(f) for _, _, f in files],
            schema=schema,
            format=ds.ParquetFileFormat(),
            filesystem=pafs.LocalFileSystem(),
            partitions=[(ds.field("cell_id") == c) & (ds.field("trial") == k) for c, k, _ in files],
        )

    def cell_requests(
        self,
        cell_id: str,
        trial: int | None = None,
        columns: list[str] | None = None,
        measured_only: bool = False,
    ) -> pd.DataFrame:
        """The one documented way to pull one cell's requests (one trial's with `trial`):
        a DataFrame of only that cell's rows (and only `columns`, if given), with
        latency_ns and service_ns; measured_only keeps the requests intended in their
        trial's measured window. Reads only that cell's files."""
        frames = []
        for cid, k, f in self._request_files(cell_id, trial):
            need = (
                None
                if columns is None
                else list(dict.fromkeys([*columns, "intended_ns", "sent_ns", "done_ns"]))
            )
            df = self._parquet(f, need)
            if df is None:
                continue
            if measured_only:
                s = read_summary(f.parent)
                if s is not None:
                    df = df[
                        (df["intended_ns"] >= s["measure_start_ns"])
                        & (df["intended_ns"] < s["measure_end_ns"])
                    ]
            df.insert(0, "trial", k)
            df.insert(0, "cell_id", cid)
            frames.append(df)
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return _with_latency(df)

    @cached_property
    def requests(self) -> pd.DataFrame:
        """Every request of every trial, with latency_ns (done - intended) and service_ns.
        All in memory: a run holding more than MAX_REQUEST_ROWS rows is refused (PerfctlError)
        in favour of cell_requests() and dataset(); a run written with `records: none` has
        no rows (empty frame), `sample:F` a sample."""
        rows = self.request_rows()
        if rows > MAX_REQUEST_ROWS:
            raise PerfctlError(
                f"{self.path}: {rows:,} requests are more than run.requests loads into memory "
                f"(MAX_REQUEST_ROWS = {MAX_REQUEST_ROWS:,}, ~{rows * 70 / 2**30:.1f} GiB). "
                "Fix: pull one cell with run.cell_requests(cell_id, columns=[...]), scan "
                "them all lazily with run.dataset().to_batches(columns=[...]), or use "
                "run.trials and run.timeline, which are small."
            )
        return _with_latency(self._gather("requests.parquet"))

    @cached_property
    def timeline(self) -> pd.DataFrame:
        return self._gather("timeline.parquet")

    @cached_property
    def endpoints(self) -> pd.DataFrame:
        """One row per cell x trial x endpoint (results/endpoints.py): cell_id, trial, the
        matrix axes, then the endpoint's figures and verdict. Trials written before
        endpoints.csv existed have no rows."""
        frames = []
        for _, t in self.trials[["cell_id", "trial"]].iterrows():
            df = _endpoints_read(trial_dir(self.path, t["cell_id"], int(t["trial"])))
            if df is not None:
                df.insert(0, "trial", int(t["trial"]))
                df.insert(0, "cell_id", t["cell_id"])
                frames.append(df)
        if not frames:
            return pd.DataFrame(columns=["cell_id", "trial", *self.axes, *ENDPOINT_COLUMNS])
        df = pd.concat(frames, ignore_index=True)
        axes = [a for a in self.axes if a in self.trials.columns]
        if axes:
            keys = self.trials[["cell_id", "trial", *axes]].drop_duplicates(["cell_id", "trial"])
            df = df.merge(keys, on=["cell_id", "trial"], how="left")
            df = df[["cell_id", "trial", *axes, *ENDPOINT_COLUMNS]]
        return df

    @cached_property
    def models(self) -> dict:
        """models.json ({} when missing or damaged: the models are fitted again)."""
        f = self.path / "models.json"
        try:
            doc = json.loads(f.read_text()) if f.is_file() else {}
        except UNREADABLE:
            return {}
        return doc if isinstance(doc, dict) else {}

    @property
    def axes(self) -> list[str]:
        return list(self.info.get("axes", []))


def _footer_reads(f: Path) -> bool:
    try:
        pq.ParquetFile(f).schema_arrow  # noqa: B018 (reads the footer)
        return True
    except UNREADABLE:
        return False


def _endpoints_read(tdir: Path) -> pd.DataFrame | None:
    """A trial's endpoints.csv, or None when it has none or it is damaged (see damaged())."""
    try:
        df = read_endpoints(tdir)
    except UNREADABLE:
        return None
    if df is not None and any(c not in df.columns for c in ENDPOINT_COLUMNS):
        return None
    return df


def _damaged_run_json(f: Path, why: str) -> PerfctlError:
    return PerfctlError(
        f"{f} is damaged ({why}): the run's configuration (axes, thresholds, host) cannot be "
        "read, so it cannot be reported, checked or compared. trials.csv and the per-trial "
        "files may still load (results.load(DIR).trials). Fix: restore run.json from a copy, "
        "or run the experiment again."
    )


def _with_latency(df: pd.DataFrame) -> pd.DataFrame:
    if not df.empty and {"done_ns", "intended_ns", "sent_ns"} <= set(df.columns):
        df["latency_ns"] = df["done_ns"] - df["intended_ns"]
        df["service_ns"] = df["done_ns"] - df["sent_ns"]
    return df


def load(path: str | Path) -> Run:
    """Open a run directory (or results/latest) for analysis."""
    p = Path(path)
    if not (p / RUN_FILE).is_file():
        raise PerfctlError(
            f"{p}: not a perfctl run directory (no run.json). Fix: give a "
            "directory written by perfctl run, e.g. results/latest."
        )
    return Run(p.resolve())
