"""Results directories: run.json, trials.csv/.parquet, per-trial raw columns.

Layout (results/<experiment>/<YYYYmmdd-HHMMSS>/, results/latest -> newest):
  run.json                       resolved config, host, versions, backend used
  trials.csv, trials.parquet     one row per trial (rewritten atomically after each trial)
  cells/<cell_id>/trial-<k>/     requests.parquet, timeline.parquet, summary.json, server.log
Notebooks: `from orchestrator import results; run = results.load("results/latest")`.
Which columns and keys these files hold is schema.py's business.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from ..errors import PerfctlError
from .schema import order_columns, read_trials, write_trials


def new_run_dir(name: str, base: Path = Path("results")) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = base / name / stamp
    n = 1
    while path.exists():
        n += 1
        path = base / name / f"{stamp}-{n}"
    return path


def prepare(path: Path) -> None:
    """Create the run dir (and check it is writable) before anything runs."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise PerfctlError(f"results dir {path} is not writable ({e.strerror}). Fix: choose "
                           "another with --out DIR, or fix its permissions.") from None


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


class TrialTable:
    """The trials of one run; `append` rewrites trials.csv and trials.parquet atomically."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.csv = run_dir / "trials.csv"
        self.rows: list[dict] = []
        if self.csv.is_file():
            self.rows = read_trials(run_dir).to_dict("records")

    def done(self) -> set[tuple[str, int]]:
        return {(r["cell_id"], int(r["trial"])) for r in self.rows}

    def append(self, row: dict) -> None:
        self.rows.append(row)
        write_trials(self.run_dir, self.frame())

    def frame(self) -> pd.DataFrame:
        return order_columns(pd.DataFrame(self.rows))


@dataclass
class Run:
    """A results directory opened for analysis: DataFrames on first use."""

    path: Path

    @cached_property
    def info(self) -> dict:
        return json.loads((self.path / "run.json").read_text())

    @cached_property
    def trials(self) -> pd.DataFrame:
        return read_trials(self.path)

    def _gather(self, name: str) -> pd.DataFrame:
        frames = []
        for _, t in self.trials[["cell_id", "trial"]].iterrows():
            f = trial_dir(self.path, t["cell_id"], int(t["trial"])) / name
            if f.is_file():
                df = pd.read_parquet(f)
                df.insert(0, "trial", int(t["trial"]))
                df.insert(0, "cell_id", t["cell_id"])
                frames.append(df)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @cached_property
    def requests(self) -> pd.DataFrame:
        """Every request of every trial, with latency_ns (done - intended) and service_ns."""
        df = self._gather("requests.parquet")
        if not df.empty:
            df["latency_ns"] = df["done_ns"] - df["intended_ns"]
            df["service_ns"] = df["done_ns"] - df["sent_ns"]
        return df

    @cached_property
    def timeline(self) -> pd.DataFrame:
        return self._gather("timeline.parquet")

    @cached_property
    def models(self) -> dict:
        f = self.path / "models.json"
        return json.loads(f.read_text()) if f.is_file() else {}

    @property
    def axes(self) -> list[str]:
        return list(self.info.get("axes", []))


def load(path: str | Path) -> Run:
    """Open a run directory (or results/latest) for analysis."""
    p = Path(path)
    if not (p / "run.json").is_file():
        raise PerfctlError(f"{p}: not a perfctl run directory (no run.json). Fix: give a "
                           "directory written by perfctl run, e.g. results/latest.")
    return Run(p.resolve())
