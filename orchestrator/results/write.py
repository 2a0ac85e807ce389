"""Writing into a claimed run: the trials table (TrialTable, rewritten atomically after each
trial) and the one paragraph an I/O failure under the run's directory becomes (unwritable,
storage_guard: disk full, permission lost, the directory removed while the run went on).
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from ..errors import PerfctlError
from .claim import RUN_FILE
from .schema import UNREADABLE, order_columns, read_trials, write_trials

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
