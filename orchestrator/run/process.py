"""The one process supervisor: every process perfctl starts (servers and their wrappers,
injection proxies, load generators) is started here, in its own process group, and registered
so `stop_all()` (called from the CLI's signal handlers and finally blocks) ends whatever is
still running, even on Ctrl-C.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import PerfctlError

CHILDREN: set[subprocess.Popen] = set()


def spawn(argv: list[str], log_path: Path | None = None, cpus: list[int] | None = None,
          cwd: Path | None = None, env: dict | None = None) -> subprocess.Popen:
    """Start argv in a new session (own process group), optionally pinned with taskset.

    stdout and stderr go to log_path (or are discarded). The process is registered for
    stop_all().
    """
    if cpus:
        argv = ["taskset", "-c", ",".join(map(str, cpus)), *argv]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=env, start_new_session=True)
    except FileNotFoundError as e:
        raise PerfctlError(f"cannot start {argv[0]!r}: {e.strerror}. Fix: install it or give "
                           "the full path in the server's cmd.") from None
    finally:
        if log_path:
            out.close()
    CHILDREN.add(proc)
    return proc


def terminate(proc: subprocess.Popen, grace_s: float = 3.0) -> int | None:
    """SIGTERM the process group, then SIGKILL after grace_s. Returns the exit code."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    if proc.poll() is None and pgid is not None:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    if pgid is not None:      # children of the group that outlived its leader, too
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    CHILDREN.discard(proc)
    if proc.stdout:
        proc.stdout.close()
    return proc.returncode


def stop_all() -> None:
    for proc in list(CHILDREN):
        terminate(proc, grace_s=1.0)


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"


def spawn_until_line(argv: list[str], timeout_s: float, what: str):
    """Start argv like spawn(), with stdout piped, and wait for its first stdout line (a
    server or proxy announcing where it listens). Returns (proc, first line, stderr file);
    the caller closes the stderr file. Raises PerfctlError with its stderr when no line comes
    within timeout_s."""
    err = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except FileNotFoundError as e:
        err.close()
        raise PerfctlError(f"cannot start {what} ({argv[0]!r}): {e.strerror}.") from None
    CHILDREN.add(proc)
    deadline = time.monotonic() + timeout_s
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
        elif proc.poll() is not None:
            break
    if not line.endswith(b"\n"):
        terminate(proc)
        err.seek(0)
        msg = err.read().decode(errors="replace").strip()
        err.close()
        raise PerfctlError(f"{what} did not start ({' '.join(argv)}): "
                           f"{msg or 'no first line within %.0f s' % timeout_s}")
    return proc, line.decode().strip(), err
