"""perfctl-proxy, built on demand and cached by a hash of its sources (proc/build.py)."""

from __future__ import annotations

from pathlib import Path

from ..proc.build import make_cached

NETEM_DIR = Path(__file__).resolve().parent
BUILD_DIR = NETEM_DIR / "build"
PROXY_BINARY = BUILD_DIR / "perfctl-proxy"


def build_proxy() -> Path:
    """The path of an up-to-date perfctl-proxy, compiled if its sources changed. Safe to call
    from several processes at once."""
    make_cached(
        NETEM_DIR,
        "all",
        "perfctl-proxy",
        "fix orchestrator/netem/proxy/proxy.c or the toolchain (gcc, make) and run again.",
        suffixes=(".c", ".h"),
        timeout_s=120.0,
    )
    return PROXY_BINARY
