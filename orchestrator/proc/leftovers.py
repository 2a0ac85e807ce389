"""children.json, the record of what a run has running right now, and reaping what a crashed
run left behind.

While a run goes, run_dir/children.json says who supervises it (`supervisor`: the
PERFCTL_SUPERVISOR value `<pid>.<start>` of that perfctl process) and lists each live child
(`pid`, `pgid`, `start`: its start time in clock ticks, `argv`) and the clean-up commands its
guardian would run (`cleanup`). Normally the guardian ends everything when perfctl dies; the
record is for when both died (a machine-wide kill, the OOM killer).

`find()` calls a process a leftover when its PERFCTL_SUPERVISOR names a perfctl process that
no longer runs (whichever run it belonged to), or when a record whose supervisor is gone lists
it with the same start time. A pid that was reused has another start time and no such mark,
so it is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

from . import procfs

SUPERVISOR_ENV = "PERFCTL_SUPERVISOR"
RECORD = "children.json"
REAP_WAIT_S = 3.0


def write_record(
    path: Path, supervisor: str, children: list[dict], cleanup: dict[str, list[list[str]]]
) -> None:
    """Replace the record atomically. Best effort: a record that cannot be written (disk
    full, the run dir removed) must not stop a trial or a clean-up; the run's own writes
    report the problem."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(
            json.dumps(
                {"supervisor": supervisor, "children": children, "cleanup": cleanup}, indent=1
            )
        )
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def read_record(run_dir: Path) -> dict | None:
    try:
        record = json.loads((run_dir / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "supervisor" in record else None


def supervisor_alive(mark: str) -> bool:
    """Whether the perfctl process named by a PERFCTL_SUPERVISOR value still runs."""
    pid, _, start = mark.partition(".")
    try:
        return procfs.alive(int(pid), int(start))
    except ValueError:
        return False


def find(own_mark: str, record: dict | None = None) -> list[int]:
    """Live processes left behind by perfctl processes that are gone (module docstring)."""
    found = set()
    for pid in procfs.pids():
        mark = procfs.env_value(pid, SUPERVISOR_ENV)
        if mark and mark != own_mark and not supervisor_alive(mark) and procfs.alive(pid):
            found.add(pid)
    if record and record["supervisor"] != own_mark and not supervisor_alive(record["supervisor"]):
        for child in record.get("children", []):
            if procfs.alive(child["pid"], child["start"]):
                found.add(child["pid"])
    return sorted(found)


def stale_service_dirs(own_mark: str, record: dict | None, run_dir: Path | None) -> list[Path]:
    """The data and socket directories of services (run/postgres.py) that a dead perfctl
    recorded for removal: only `rm -rf` of a path in a services/ directory of run_dir or a /tmp/perfctl-*
    directory is honoured, so a record from elsewhere cannot remove anything else."""
    if not record or record["supervisor"] == own_mark or supervisor_alive(record["supervisor"]):
        return []
    out = []
    for argvs in (record.get("cleanup") or {}).values():
        for argv in argvs:
            if len(argv) < 3 or argv[:2] != ["rm", "-rf"]:
                continue
            for raw in argv[2:]:
                p = Path(raw)
                inside = (
                    run_dir is not None
                    and p.is_relative_to(Path(run_dir))
                    and "services" in p.relative_to(Path(run_dir)).parts
                )
                if ".." not in p.parts and (
                    inside or (p.parent == Path("/tmp") and p.name.startswith("perfctl-"))
                ):
                    out.append(p)
    return out


def reap(own_mark: str, record: dict | None = None, run_dir: Path | None = None) -> list[str]:
    """SIGKILL every leftover (and its process group when it leads one) and wait, bounded,
    until they are gone; then remove the service directories the record names
    (stale_service_dirs). Returns one short description per process ("1234 python3 ...")."""
    pids = find(own_mark, record)
    described = [f"{pid} {' '.join(procfs.argv(pid))[:70]}".strip() for pid in pids]
    for pid in pids:
        try:
            if procfs.pgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + REAP_WAIT_S
    while any(procfs.alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    for d in stale_service_dirs(own_mark, record, run_dir):
        shutil.rmtree(d, ignore_errors=True)
    return described
