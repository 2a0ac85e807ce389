"""Results directories: run.json, trials.csv/.parquet, per-trial raw columns.

Layout (results/<experiment>/<YYYYmmdd-HHMMSS>/, results/latest -> newest):
  run.json                       resolved config, host, versions, backend used
  trials.csv, trials.parquet     one row per trial (rewritten atomically after each trial)
  cells/<cell_id>/trial-<k>/     requests.parquet (all, a sample or none: load.records),
                                 digest.json, latency.hlog, timeline.parquet, summary.json,
                                 server.log
Notebooks: `from orchestrator import results; run = results.load("results/latest")`; for runs
larger than memory `run.cell_requests(cell_id)` (one cell) and `run.dataset()` (lazy, pyarrow).
Which columns and keys these files hold is schema.py's business.
"""

from __future__ import annotations

import errno
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import PerfctlError
from .endpoints import ENDPOINT_COLUMNS, ENDPOINTS_FILE, read_endpoints
from .schema import (
    UNREADABLE,
    order_columns,
    read_summary,
    read_trials,
    summary_problem,
    why_unreadable,
    write_trials,
)

RUN_FILE = "run.json"  # what makes a directory a run
MAX_REQUEST_ROWS = 20_000_000  # Run.requests loads at most this many rows (~1.4 GB)
# errno values that mean "this directory cannot be written", not a bug in perfctl
STORAGE_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EIO,
    errno.ESTALE,
}


def new_run_dir(name: str, base: Path = Path("results")) -> Path:
    """Create and return base/name/<YYYYmmdd-HHMMSS> (absolute), or -2, -3, ... after it when
    that exists: mkdir is atomic, so two runs started in the same second get two dirs."""
    base = base.resolve()
    parent = Path(os.path.normpath(base / name))  # lexically: results/<name> may be a link
    if parent.parent != base:  # the name rule keeps it inside
        raise PerfctlError(
            f"experiment name {name!r} would put the run outside {base}. "
            "Fix: use letters, digits, . _ - in `name:`, not only dots."
        )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    _mkdir(parent, parents=True, exist_ok=True)
    for n in range(1, 10_000):
        path = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as e:
            raise _not_writable(path, e, "--out DIR") from None
    raise PerfctlError(f"{parent}: 10,000 runs started in second {stamp}. Fix: give --out DIR.")


def claim_out_dir(path: Path) -> Path:
    """--out: a new directory (created here) or an empty one, returned absolute. Raises
    PerfctlError, having written nothing, for an existing run (that takes --resume) and for
    anything else that exists and is not empty."""
    path = path.resolve()
    if path.is_dir():
        if (path / RUN_FILE).is_file():
            raise PerfctlError(
                f"--out {path}: this directory already holds a run ({_experiment_of(path)}); "
                "writing another run into it would mix their trials. Fix: perfctl run --resume "
                f"{path} to finish that run, or give --out a new or empty directory."
            )
        if any(path.iterdir()):
            raise PerfctlError(
                f"--out {path}: this directory is not empty and is not a perfctl run (no "
                f"{RUN_FILE}); perfctl writes a run only into a new or empty directory. Fix: "
                "give --out a new or empty directory (it is created), e.g. --out "
                f"{path / 'run'}."
            )
        return path
    if path.exists() or path.is_symlink():
        raise PerfctlError(
            f"--out {path}: exists and is not a directory. Fix: give --out a "
            "new or empty directory."
        )
    try:
        path.mkdir(parents=True)
    except FileExistsError:  # created by someone else just now: judge it again
        return claim_out_dir(path)
    except OSError as e:
        raise _not_writable(path, e, "--out DIR") from None
    return path


def _experiment_of(path: Path) -> str:
    try:
        return f"experiment {json.loads((path / RUN_FILE).read_text())['experiment']!r}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{RUN_FILE} is there"


def _mkdir(path: Path, **kw) -> None:
    try:
        path.mkdir(**kw)
    except OSError as e:
        raise _not_writable(path, e, "--out DIR") from None


def _not_writable(path: Path, e: OSError, option: str) -> PerfctlError:
    return PerfctlError(
        f"results dir {path} is not writable ({e.strerror}). Fix: choose "
        f"another with {option}, or fix its permissions."
    )


def prepare(path: Path) -> None:
    """Check that the run dir (created by new_run_dir or claim_out_dir, or an existing run for
    --resume) can be written, before anything runs."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise _not_writable(path, e, "--out DIR") from None


def check_present(run_dir: Path) -> None:
    """PerfctlError when run_dir lost its run.json since the run began (someone removed it)."""
    if not (run_dir / RUN_FILE).is_file():
        raise _removed(run_dir)


def _removed(run_dir: Path) -> PerfctlError:
    return PerfctlError(
        f"results dir {run_dir} was removed (or lost its {RUN_FILE}) while the run was going; "
        "every process perfctl started is stopped and nothing more is written. Fix: leave the "
        "results dir alone while perfctl runs, and start the run again (perfctl run FILE)."
    )


def unwritable(run_dir: Path, path: Path, e: OSError | None = None) -> PerfctlError:
    """The one paragraph for an I/O failure under run_dir (disk full, permission lost, dir
    removed): which path, why, that finished trials are kept, and the fix. e: the error, or
    None when only its effect is known (the load generator exited saying it could not write)."""
    if not (run_dir / RUN_FILE).is_file():
        return _removed(run_dir)
    code = e.errno if e is not None else _diagnose(run_dir)
    why = os.strerror(code) if code else "an I/O error"
    kept = (
        f"Every finished trial is kept in {run_dir / 'trials.csv'}"
        if (run_dir / "trials.csv").is_file()
        else "No trial had finished"
    )
    resume = f"perfctl run --resume {run_dir}"
    if code in (errno.ENOSPC, errno.EDQUOT):
        fix = (
            f"free space on that filesystem (df -h {run_dir}), then {resume} runs the rest; "
            "or run again with --out on a disk with room"
        )
    elif code in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = (
            f"make {run_dir} writable again (permissions, or a read-only mount), then "
            f"{resume} runs the rest"
        )
    else:
        fix = f"check the disk holding {run_dir}, then {resume} runs the rest"
    return PerfctlError(
        f"cannot write {path}: {why}. {kept}; the trial that was running is "
        f"not recorded and every process perfctl started is stopped. Fix: {fix}."
    )


def _diagnose(run_dir: Path) -> int | None:
    """An errno that explains why run_dir cannot be written now, or None."""
    try:
        st = os.statvfs(run_dir)
    except OSError as e:
        return e.errno
    if st.f_flag & os.ST_RDONLY:
        return errno.EROFS
    if not os.access(run_dir, os.W_OK):
        return errno.EACCES
    if st.f_bavail * st.f_frsize < 1 << 20:
        return errno.ENOSPC
    return None


@contextmanager
def storage_guard(run_dir: Path):
    """Turn an OSError that means run_dir cannot be written (the dir removed; or one of
    STORAGE_ERRNOS about a path under run_dir, or no path) into one paragraph, unwritable()."""
    try:
        yield
    except OSError as e:
        if not (run_dir / RUN_FILE).is_file():  # whatever failed, the run dir is gone
            raise _removed(run_dir) from None
        name = Path(str(e.filename)).resolve() if e.filename else None
        if e.errno not in STORAGE_ERRNOS or (name is not None and not name.is_relative_to(run_dir)):
            raise
        raise unwritable(run_dir, name or run_dir, e) from None


def point_latest(run_dir: Path, base: Path = Path("results")) -> None:
    """results/latest -> run_dir (relative link), replaced atomically."""
    try:
        base.mkdir(parents=True, exist_ok=True)
        link = base / "latest"
        tmp = base / f".latest-{os.getpid()}"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(os.path.relpath(run_dir.resolve(), base.resolve()))
        os.replace(tmp, link)
    except OSError:
        pass


def trial_dir(run_dir: Path, cell_id: str, trial: int) -> Path:
    return run_dir / "cells" / cell_id / f"trial-{trial}"


def _csv_rows(csv: Path) -> int | None:
    try:
        return len(pd.read_csv(csv, usecols=[0]))
    except UNREADABLE:  # missing, empty or damaged: rewritten from the parquet file
        return None


class TrialTable:
    """The trials of one run; `append` rewrites trials.csv and trials.parquet atomically."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.csv = run_dir / "trials.csv"
        self.rows: list[dict] = []
        if self.csv.is_file() or (run_dir / "trials.parquet").is_file():
            self.rows = read_trials(run_dir).to_dict("records")
            if _csv_rows(self.csv) != len(self.rows):  # killed between the two renames
                write_trials(run_dir, self.frame())

    def done(self) -> set[tuple[str, int]]:
        return {(r["cell_id"], int(r["trial"])) for r in self.rows}

    def append(self, row: dict) -> None:
        """Record one finished trial. trials.csv and trials.parquet are each replaced
        atomically; if writing fails (disk full) the old files stay whole, the row is not
        recorded, and the OSError propagates."""
        check_present(self.run_dir)  # never recreate a removed run dir's trials.csv
        self.rows.append(row)
        try:
            write_trials(self.run_dir, self.frame())
        except OSError:
            self.rows.pop()
            for tmp in ("trials.csv.tmp", "trials.parquet.tmp"):
                try:
                    (self.run_dir / tmp).unlink()
                except OSError:
                    pass
            raise

    def frame(self) -> pd.DataFrame:
        return order_columns(pd.DataFrame(self.rows))


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
