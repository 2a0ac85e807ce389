"""Reading the kernel's scheduler counters from /proc: per-CPU time (/proc/stat) and, per
thread, time on a CPU, time waiting for one and involuntary context switches.

The parse functions take the files' text (tests feed them synthetic text); the read functions
open the files and return None (or skip the thread) when a process or thread has gone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PROC = "/proc"
USER_HZ = os.sysconf("SC_CLK_TCK")  # the unit of /proc/stat's CPU times


@dataclass(frozen=True)
class CpuTicks:
    """One CPU's cumulative time, in USER_HZ ticks, since boot (from /proc/stat). The time
    spent running tasks is what these leave of the elapsed time: `idle` is exact on tickless
    kernels, while user/system are sampled at the scheduler tick and undercount short bursts."""

    idle: int  # idle + iowait: nothing to run
    steal: int  # the hypervisor ran something else while this vCPU wanted to run
    irq: int  # irq + softirq (a task's run time may or may not include it: left out)


def parse_proc_stat(text: str) -> dict[int, CpuTicks]:
    """The per-CPU lines of /proc/stat (`cpuN user nice system idle iowait irq softirq steal
    ...`), by CPU number. The aggregate `cpu` line is left out."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *fields = line.split()
        if not name[3:].isdigit():
            continue
        v = [int(x) for x in fields[:8]] + [0] * (8 - len(fields[:8]))
        _user, _nice, _system, idle, iowait, irq, softirq, steal = v
        out[int(name[3:])] = CpuTicks(idle=idle + iowait, steal=steal, irq=irq + softirq)
    return out


def parse_schedstat(text: str) -> tuple[int, int]:
    """(on-CPU ns, run-queue wait ns) from a /proc/<pid>/task/<tid>/schedstat line
    (`run_ns wait_ns timeslices`)."""
    fields = text.split()
    return int(fields[0]), int(fields[1])


def parse_involuntary_switches(text: str) -> int:
    """nonvoluntary_ctxt_switches from a /proc/<pid>/task/<tid>/status text (0 if absent):
    how often the thread was taken off a CPU while it still wanted to run."""
    at = text.find("nonvoluntary_ctxt_switches:")
    if at < 0:
        return 0
    return int(text[at + len("nonvoluntary_ctxt_switches:") :].split(None, 1)[0])


def parse_process_cpu_ticks(text: str) -> int:
    """utime + stime, in USER_HZ ticks, from a /proc/<pid>/stat line: the CPU time of every
    thread the process has had, the ended ones included (the kernel adds a thread's time to
    its process when it exits). The comm field may hold spaces and parentheses: the fields
    are counted after its last ')'."""
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def read_process_cpu_ns(pid: int) -> int | None:
    """The CPU time of every thread pid has had, ended ones included, in ns (to the tick:
    10 ms at USER_HZ 100); None when the process has gone."""
    try:
        return parse_process_cpu_ticks(_read(f"{PROC}/{pid}/stat")) * 1_000_000_000 // USER_HZ
    except (OSError, ValueError, IndexError):
        return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def read_cpu_ticks() -> dict[int, CpuTicks]:
    return parse_proc_stat(_read(f"{PROC}/stat"))


def read_threads(pid: int) -> dict[int, tuple[int, int, int]]:
    """tid -> (on-CPU ns, run-queue wait ns, involuntary switches) for every thread of pid;
    empty when the process has gone."""
    out = {}
    try:
        tids = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        base = f"{PROC}/{pid}/task/{tid}"
        try:
            run_ns, wait_ns = parse_schedstat(_read(f"{base}/schedstat"))
            switches = parse_involuntary_switches(_read(f"{base}/status"))
        except (OSError, ValueError, IndexError):
            continue
        out[int(tid)] = (run_ns, wait_ns, switches)
    return out
