"""The consoles every command prints to: 160 columns off a terminal (COLUMNS when it is set),
so that a log keeps whole table rows; no :emoji: codes (perfctl prints none, and rich's table of them costs start-up
time). Numbers in tables are written by orchestrator/numbers.py, a slow step's spinner by
api/display.py:step."""

from __future__ import annotations

import os
import sys

from rich.console import Console

console = Console(
    width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160, emoji=False
)
err_console = Console(stderr=True, emoji=False)
