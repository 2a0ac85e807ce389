"""What both soaks (soak.py, and soak_cluster.py for `soak.py --cluster`) measure the same way:
a perfctl process's descriptors and RSS over its life (Incarnation, GROWTH_LIMIT), and the
trials.csv rows that must survive a killed perfctl unchanged (rows, COMPARED, same).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

GROWTH_LIMIT = 0.10
WINDOW = 5  # samples (one a second) whose median is "start" or "end"


@dataclass
class Incarnation:
    """One perfctl process of the soak: its samples (t, rows recorded, fds, RSS in MiB)."""

    proc: subprocess.Popen
    rows_at_start: int
    samples: list[tuple[float, int, int, float]] = field(default_factory=list)

    def sample(self, rows: int) -> None:
        pid = self.proc.pid
        try:
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            rss_mib = (
                int(Path(f"/proc/{pid}/statm").read_text().split()[1])
                * os.sysconf("SC_PAGE_SIZE")
                / 2**20
            )
        except (OSError, ValueError):
            return
        self.samples.append((time.monotonic(), rows, fds, rss_mib))

    def growth(self) -> tuple[tuple, tuple] | None:
        """(start, end): the medians of its first and of its last WINDOW samples once it has
        recorded a trial of each mode (a descriptor open for a moment is no growth), or None.
        Each is (t, trials recorded, fds, RSS MiB)."""
        own = [s for s in self.samples if s[1] >= self.rows_at_start + 2]
        if len(own) < 2 * WINDOW:
            return None
        med = lambda xs: tuple(statistics.median(col) for col in zip(*xs))  # noqa: E731
        return med(own[:WINDOW]), med(own[-WINDOW:])


COMPARED = ("requests", "errors", "throughput_rps", "latency_p99_ms", "valid")


def same(a: pd.Series, b: pd.Series) -> pd.Series:
    """Elementwise: both missing, equal as numbers, or else equal as text (a row read back
    from trials.parquet may hold 665.0 where the CSV said 665). Missing is tested first: in
    pandas 3 `astype(str)` keeps NaN missing, and missing never equals missing."""
    x, y = pd.to_numeric(a, errors="coerce"), pd.to_numeric(b, errors="coerce")
    return (a.isna() & b.isna()) | (x == y) | (a.astype(str) == b.astype(str)).fillna(False)


def rows(out: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(out / "trials.csv")
    except (OSError, pd.errors.EmptyDataError):
        return pd.DataFrame(columns=["cell_id", "trial"])
