"""Fixtures of the cluster tests: perfctl as a real subprocess (real signals reach it), and
what a local cluster leaves on the machine (processes, namespaces, links)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks._common import perfctl_argv  # noqa: E402


@pytest.fixture
def start_perfctl(perfctl_env):
    """start_perfctl(*args) -> Popen (text pipes); killed at the end of the test."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            perfctl_argv(*args),
            cwd=ROOT,
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


@pytest.fixture
def perfctl(perfctl_env):
    def run(*args: str, timeout: float = 240):
        return subprocess.run(
            perfctl_argv(*args),
            cwd=ROOT,
            env=perfctl_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
