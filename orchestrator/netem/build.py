"""Build perfctl-proxy on demand, cached by a hash of its sources (like the bundled servers)."""
from __future__ import annotations

import fcntl
import hashlib
import subprocess
from pathlib import Path

from ..errors import PerfctlError

NETEM_DIR = Path(__file__).resolve().parent
BUILD_DIR = NETEM_DIR / "build"
PROXY_BINARY = BUILD_DIR / "perfctl-proxy"
_STAMP = BUILD_DIR / ".stamp-all"


def sources_hash() -> str:
    """Hash of everything the proxy build reads; a change rebuilds."""
    h = hashlib.sha256()
    for p in sorted([NETEM_DIR / "Makefile", *(NETEM_DIR / "proxy").rglob("*")]):
        if p.is_file() and (p.suffix in (".c", ".h") or p.name == "Makefile"):
            h.update(str(p.relative_to(NETEM_DIR)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def build_proxy() -> Path:
    """Return the path of an up-to-date perfctl-proxy, compiling it if its sources changed.
    Safe to call from several processes at once (a file lock serialises builds)."""
    digest = sources_hash()
    if PROXY_BINARY.is_file() and _STAMP.is_file() and _STAMP.read_text() == digest:
        return PROXY_BINARY
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with open(BUILD_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if PROXY_BINARY.is_file() and _STAMP.is_file() and _STAMP.read_text() == digest:
            return PROXY_BINARY
        try:
            proc = subprocess.run(["make", "-s", "-B", "-C", str(NETEM_DIR), "all"],
                                  capture_output=True, text=True, timeout=120)
        except FileNotFoundError as e:
            raise PerfctlError(f"cannot build perfctl-proxy: {e.filename} not found; install "
                               "make and gcc (apt-get install make gcc)") from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise PerfctlError(
                f"building perfctl-proxy failed (make -C orchestrator/netem all, exit "
                f"{proc.returncode}). Last lines:\n{tail}\nFix orchestrator/netem/proxy/proxy.c "
                "or the toolchain (gcc, make) and run again.")
        _STAMP.write_text(digest)
    return PROXY_BINARY
