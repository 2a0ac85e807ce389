"""What the cluster tests share: whether a local cluster can run here, and what one leaves
on the machine (namespaces, the bridge)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def needs_root_and_ip():
    if (
        os.geteuid() != 0
        or subprocess.run(["sh", "-c", "command -v ip"], capture_output=True).returncode != 0
    ):
        pytest.skip("a local cluster needs root and iproute2 (network namespaces)")


def cluster_links(pid: int) -> list[str]:
    """Network namespaces and the bridge that perfctl process `pid` made (a local cluster's
    hosts are perfctl-<pid>-<n>, its bridge pcbr<pid>)."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return re.findall(rf"^(perfctl-{pid}-\d+)", ns, re.M) + re.findall(
        rf"^\d+:\s+(pcbr{pid})[:@]", links, re.M
    )
