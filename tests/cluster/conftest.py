"""Fixtures of the cluster tests: perfctl as a real subprocess (real signals reach it), and
what a local cluster leaves on the machine (processes, namespaces, links)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._common import perfctl_argv  # noqa: E402


def needs_root_and_ip():
    if os.geteuid() != 0 or subprocess.run(["sh", "-c", "command -v ip"],
                                           capture_output=True).returncode != 0:
        pytest.skip("a local cluster needs root and iproute2 (network namespaces)")


@pytest.fixture
def start_perfctl(perfctl_env):
    """start_perfctl(*args) -> Popen (text pipes); killed at the end of the test."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen(perfctl_argv(*args), cwd=ROOT, env=perfctl_env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
        return subprocess.run(perfctl_argv(*args), cwd=ROOT, env=perfctl_env,
                              capture_output=True, text=True, timeout=timeout)
    return run


def cluster_links(pid: int) -> list[str]:
    """Network namespaces and the bridge that perfctl process `pid` made (a local cluster's
    hosts are perfctl-<pid>-<n>, its bridge pcbr<pid>)."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return (re.findall(rf"^(perfctl-{pid}-\d+)", ns, re.M)
            + re.findall(rf"^\d+:\s+(pcbr{pid})[:@]", links, re.M))
