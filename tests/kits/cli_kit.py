"""`perfctl` run as a user runs it: `python -m orchestrator.cli ARGS` in a child process, its
output captured, bounded in time. The one helper for the tests that drive the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli_env(**extra: str) -> dict:
    """The environment a test's perfctl gets: the repo importable, a wide terminal."""
    return dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="160", **extra)


def perfctl(*args, env: dict | None = None, cwd: Path = ROOT, timeout: float = 60):
    """CompletedProcess of `perfctl ARGS` (stdout and stderr as text)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *map(str, args)],
        cwd=cwd,
        env=cli_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
