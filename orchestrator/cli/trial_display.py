"""What `perfctl run` shows while trials run.

On a terminal: a progress bar (trials done, elapsed, ETA) and under it one line, refreshed
every second, of what the running trial does: its phase, req/s, p50 and p99 of the last
second, errors, the server's CPU, the load generator's send lateness and the host-noise flag
(measure/live.py). Off a terminal, or with --quiet: plain log lines, one per trial start and end,
and (not --quiet) one per second of load.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column
from rich.text import Text

from ..measure.live import LiveSecond


class _BarWithLine(Progress):
    """A rich Progress that renders one more line under its bars."""

    live_line = ""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        if self.live_line:
            yield Text(self.live_line, no_wrap=True, overflow="ellipsis")


class LiveDisplay:
    """The terminal view: progress bar and the live line."""

    def __init__(self, console: Console, total: int, done: int) -> None:
        # the cell's label gives way (ellipsis) so the counts and times are never cut
        label = Column(ratio=1, no_wrap=True, overflow="ellipsis", min_width=8)
        self.progress = _BarWithLine(
            TextColumn("{task.description}", table_column=label),
            BarColumn(bar_width=8),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            expand=True,
        )
        self.task = self.progress.add_task("trials", total=total, completed=done)

    def __enter__(self) -> LiveDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.live_line = ""
        self.progress.__exit__(*exc)

    def on_start(self, label: str, trial: int) -> None:
        self.progress.live_line = "starting the server ..."
        self.progress.update(self.task, description=f"{label} #{trial}")

    def on_second(self, s: LiveSecond) -> None:
        self.progress.live_line = s.line()
        self.progress.refresh()

    def on_trial(self, row: dict) -> None:
        self.progress.live_line = ""
        self.progress.advance(self.task)
        if not row.get("valid", True):
            self.progress.console.print(
                f"[red]invalid trial[/] {row['cell_id']} #{row['trial']}: {row['invalid_reasons']}"
            )


class PlainDisplay:
    """Log lines: no cursor movement, nothing redrawn."""

    def __init__(self, console: Console, total: int, done: int, per_second: bool) -> None:
        self.console, self.total, self.done = console, total, done
        self.per_second = per_second
        self.t0 = time.monotonic()

    def __enter__(self) -> PlainDisplay:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def _print(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True, markup=False)

    def on_start(self, label: str, trial: int) -> None:
        self._print(f"trial {self.done + 1}/{self.total}: {label} #{trial}")

    def on_second(self, s: LiveSecond) -> None:
        if self.per_second:
            self._print(f"  {s.line()}")

    def on_trial(self, row: dict) -> None:
        self.done += 1
        verdict = "valid" if row.get("valid", True) else f"INVALID: {row['invalid_reasons']}"
        if row.get("quiet") is False:
            verdict += f"; noisy: {row.get('noise_reasons', '')}"
        rps, p99 = row.get("throughput_rps"), row.get("latency_p99_ms")
        numbers = (
            f"{rps:,.0f} req/s, p99 {p99:.3g} ms, "
            if isinstance(rps, float) and isinstance(p99, float) and p99 == p99
            else ""
        )
        self._print(f"  done: {numbers}{verdict} ({time.monotonic() - self.t0:.0f} s elapsed)")


def make(console: Console, total: int, done: int, quiet: bool):
    """The live view on a terminal, plain lines elsewhere or with quiet."""
    if console.is_terminal and not quiet:
        return LiveDisplay(console, total, done)
    return PlainDisplay(console, total, done, per_second=not quiet)
