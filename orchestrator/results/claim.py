"""Claiming a run's directory: results/<experiment>/<YYYYmmdd-HHMMSS>/ made new (new_run_dir) or
given with --out (claim_out_dir, a new or empty directory), checked writable before anything
runs (prepare), and results/latest pointed at it (point_latest). What makes a directory a run
(RUN_FILE) and where a trial's files go (trial_dir) are named here.

Layout (results/<experiment>/<YYYYmmdd-HHMMSS>/, results/latest -> newest):
  run.json                       resolved config, host, versions, backend used
  trials.csv, trials.parquet     one row per trial (rewritten atomically after each trial)
  cells/<cell_id>/trial-<k>/     requests.parquet (all, a sample or none: load.records),
                                 digest.json, latency.hlog, timeline.parquet, summary.json,
                                 server.log
Writing into a claimed run is write.py's business, reading it back read.py's, and which
columns and keys the files hold schema.py's.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..errors import PerfctlError

RUN_FILE = "run.json"  # what makes a directory a run


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
