"""Fixtures of the fault suite: perfctl as a real subprocess, so real signals reach it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fault_kit import ROOT, perfctl_argv  # noqa: E402


@pytest.fixture
def perfctl(perfctl_env):
    """perfctl(*args, cwd=..., timeout=..., preexec_fn=...) -> CompletedProcess (text)."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 120, **kw):
        return subprocess.run(
            perfctl_argv(*args),
            cwd=cwd or ROOT,
            env=perfctl_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kw,
        )

    return run


@pytest.fixture
def start_perfctl(perfctl_env):
    """start_perfctl(*args, cwd=...) -> Popen; killed at the end of the test if still running."""
    started: list[subprocess.Popen] = []

    def start(*args: str, cwd: Path | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(
            perfctl_argv(*args),
            cwd=cwd or ROOT,
            env=perfctl_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
