"""The consoles every command prints to, and the spinner of a slow step. Numbers in tables are
written by orchestrator/numbers.py."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

from rich.console import Console

console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)


@contextmanager
def step(what: str):
    """A slow step the user should see: a spinner on a terminal, else a line before and one
    after with the time it took."""
    t0 = time.monotonic()
    if console.is_terminal:
        with console.status(f"{what} ..."):
            yield
        console.print(f"{what}: done in {time.monotonic() - t0:.1f} s", highlight=False)
    else:
        console.print(f"{what} ...", highlight=False)
        yield
        console.print(f"{what}: done in {time.monotonic() - t0:.1f} s", highlight=False)
