"""What `perfctl run` and `perfctl.run()` show while trials run.

On a terminal: a progress bar (trials done, elapsed, ETA) and under it one line, refreshed
every second, of what the running trial does: its phase, req/s, p50 and p99 of the last
second, errors, the server's CPU, the load generator's send lateness and the host-noise flag
(measure/live.py). In a Jupyter notebook: the same bar and line, redrawn in place in the cell's
output. Off a terminal, or with --quiet: plain log lines, one per trial start and end, and (not
--quiet) one per second of load.

Every display has the same four parts: `with display:` around the trials, and on_start,
on_second, on_trial as execute_plan calls them. make() picks one for a console.
"""

from __future__ import annotations

import io
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console, Group
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

if TYPE_CHECKING:
    from ..measure.live import LiveSecond


class _BarWithLine(Progress):
    """A rich Progress that renders one more line under its bars."""

    live_line = ""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        if self.live_line:
            yield Text(self.live_line, no_wrap=True, overflow="ellipsis")


def _bar(console: Console) -> _BarWithLine:
    # the cell's label gives way (ellipsis) so the counts and times are never cut
    label = Column(ratio=1, no_wrap=True, overflow="ellipsis", min_width=8)
    return _BarWithLine(
        TextColumn("{task.description}", table_column=label),
        BarColumn(bar_width=8),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        expand=True,
        auto_refresh=console.is_terminal,
    )


class LiveDisplay:
    """The terminal view: progress bar and the live line."""

    def __init__(self, console: Console, total: int, done: int) -> None:
        self.progress = _bar(console)
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

    def on_retry(self, row: dict, why: str, attempt: int, of: int) -> None:
        self.progress.live_line = ""
        self.progress.console.print(retry_line(row, why, attempt, of), markup=False)

    def on_trial(self, row: dict) -> None:
        self.progress.live_line = ""
        self.progress.advance(self.task)
        if not row.get("valid", True):
            self.progress.console.print(
                f"[red]invalid trial[/] {row['cell_id']} #{row['trial']}: {row['invalid_reasons']}"
            )


def retry_line(row: dict, why: str, attempt: int, of: int) -> str:
    """The line for an attempt the host spoiled, taken again (run/retry.py)."""
    return (
        f"  spoiled by the host ({why}): taken again, attempt {attempt} of at most {of} "
        f"(the spoiled one is kept in retried.csv)"
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

    def on_retry(self, row: dict, why: str, attempt: int, of: int) -> None:
        self._print(retry_line(row, why, attempt, of))

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
        if numbers and row.get("figures_from") == "send":  # what the server saw (validity.py)
            numbers = numbers[:-2] + " from the send, "
        warm = row.get("warmup_auto_s")
        if isinstance(warm, float) and warm == warm:  # warmup: auto (loadgen/prewarm.py)
            settled = "steady" if row.get("warmup_auto_settled") else "NOT steady at its limit"
            numbers += f"warmed up {warm:.1f} s ({settled}), "
        self._print(f"  done: {numbers}{verdict} ({time.monotonic() - self.t0:.0f} s elapsed)")


class NotebookDisplay(LiveDisplay):
    """The terminal view in a Jupyter cell: the bar and the live line rendered to HTML and
    redrawn in place through an IPython display handle (no ipywidgets, which rich's own live
    view in Jupyter needs). Lines printed meanwhile (an invalid trial) go under it."""

    def __init__(self, console: Console, total: int, done: int) -> None:
        super().__init__(console, total, done)
        self.handle = None

    def __enter__(self) -> NotebookDisplay:
        from IPython.display import display  # a notebook's kernel has IPython; a terminal not

        self.handle = display(self.bundle(), raw=True, display_id=True)
        return self

    def __exit__(self, *exc) -> None:
        self.progress.live_line = ""
        self.redraw()

    def bundle(self) -> dict[str, str]:
        """The bar and the live line as a Jupyter output: HTML with rich's colours, and text."""
        out = Console(
            file=io.StringIO(),
            record=True,
            width=self.progress.console.width,
            force_terminal=True,
            force_jupyter=False,
            color_system="truecolor",
        )
        out.print(Group(*self.progress.get_renderables()))
        text = out.export_text(clear=False)
        html = out.export_html(inline_styles=True, code_format=_PRE)
        return {"text/plain": text, "text/html": html}

    def redraw(self) -> None:
        if self.handle is not None:
            self.handle.update(self.bundle(), raw=True)

    def on_start(self, label: str, trial: int) -> None:
        super().on_start(label, trial)
        self.redraw()

    def on_second(self, s: LiveSecond) -> None:
        self.progress.live_line = s.line()
        self.redraw()

    def on_retry(self, row: dict, why: str, attempt: int, of: int) -> None:
        super().on_retry(row, why, attempt, of)
        self.redraw()

    def on_trial(self, row: dict) -> None:
        super().on_trial(row)
        self.redraw()


# rich's own look for a Jupyter output (rich/jupyter.py), around the exported spans
_PRE = (
    '<pre style="white-space:pre;overflow-x:auto;line-height:normal;'
    "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace\">{code}</pre>"
)


def make(console: Console, total: int, done: int, quiet: bool):
    """The live view on a terminal or in a Jupyter notebook. Plain lines elsewhere (one per
    trial start and end, and one per second of load) or with quiet (no per-second lines)."""
    if console.is_jupyter and not quiet:
        return NotebookDisplay(console, total, done)
    if console.is_terminal and not quiet:
        return LiveDisplay(console, total, done)
    return PlainDisplay(console, total, done, per_second=not quiet)


@contextmanager
def step(console: Console, what: str):
    """A slow step the user should see: a spinner on a terminal, else a line before and one
    after with the time it took."""
    t0 = time.monotonic()
    if console.is_terminal:
        with console.status(f"{what} ..."):
            yield
    else:
        console.print(f"{what} ...", highlight=False)
        yield
    console.print(f"{what}: done in {time.monotonic() - t0:.1f} s", highlight=False)
