"""What /proc says about a process: its start time, process group, command line, and whether its
environment carries a given mark. Standard library only: the guardian imports it too.

A pid alone is not an identity: the kernel reuses pids (pid_max is often 32768), so a pid
recorded by a run that crashed an hour ago may now be someone else's process. (pid, start)
is an identity: `start_ticks` is the process's start time in clock ticks after boot, field 22
of /proc/<pid>/stat, and no two processes of one boot share both.
"""

from __future__ import annotations

import os


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after `(comm)`: state first (field 3), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].decode().split()


def start_ticks(pid: int) -> int | None:
    """Start time in clock ticks after boot, or None when there is no such process."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def ppid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def pgid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[2]) if fields else None


def alive(pid: int, start: int | None = None) -> bool:
    """True while process `pid` runs: it exists, and (when start is given) is the one that
    started then, not a later process that got the same pid.

    A zombie is not alive: it has exited, and only its exit status waits for its parent to
    collect it (state Z, or X while being reaped). So a child that exited reads as gone before
    anyone waits for it, and the same holds for any process, ours or another user's: /proc
    answers for all of them, where kill(pid, 0) would need permission and count a zombie as
    running. The one answer perfctl uses everywhere (leftovers, namespaces, bridges)."""
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return False
    return start is None or int(fields[19]) == start


def argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:  # gone, or another user's process
        return []


def has_env(pid: int, entry: bytes) -> bool:
    """Whether the process's environment holds exactly `entry` (b"NAME=value")."""
    return entry in _environ(pid)


def env_value(pid: int, name: str) -> str | None:
    """The value of environment variable `name` in the process (as it was at exec), or None."""
    prefix = name.encode() + b"="
    for entry in _environ(pid):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def pids() -> list[int]:
    """Every pid visible in /proc."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def marked(entry: bytes, exclude: int | None = None) -> list[int]:
    """Live processes whose environment holds `entry` (every process perfctl starts carries
    its supervisor's mark, and so do their children, unless they clear their environment)."""
    return [pid for pid in pids() if pid != exclude and has_env(pid, entry) and alive(pid)]


def parse_children(text: str) -> list[int]:
    """The pids in a /proc/<pid>/task/<tid>/children file (space-separated)."""
    return [int(x) for x in text.split()]


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def descendants(pid: int, prune: set[int] | frozenset[int] = frozenset()) -> list[int] | None:
    """Every process below pid (children of all its threads, recursively), from the
    /proc/<pid>/task/<tid>/children files: no scan of all of /proc. None when the kernel has
    no such files (CONFIG_PROC_CHILDREN off). A pid in prune is listed but not walked below
    (a caller that already knows that subtree: a 200-thread JVM costs 200 reads a walk)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in prune and p != pid:
            continue
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                kids = parse_children(_read_text(f"/proc/{p}/task/{tid}/children"))
            except FileNotFoundError:
                if not os.path.exists(f"/proc/{p}/task/{tid}"):
                    continue
                return None
            except OSError:
                continue
            out += kids
            todo += kids
    return out
