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
    """A local cluster needs root (not make setup's to give: a skip) and iproute2's `ip`
    (make setup installs it: a failure)."""
    if os.geteuid() != 0:
        pytest.skip("a local cluster needs root (network namespaces)")
    import setup_kit

    setup_kit.require_tools("ip", package="iproute2")


def cluster_links(pid: int) -> list[str]:
    """Network namespaces and the bridge that perfctl process `pid` made (a local cluster's
    hosts are perfctl-<pid>-<n>, its bridge pcbr<pid>)."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return re.findall(rf"^(perfctl-{pid}-\d+)", ns, re.M) + re.findall(
        rf"^\d+:\s+(pcbr{pid})[:@]", links, re.M
    )
