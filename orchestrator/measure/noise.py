"""Host noise in one trial: how much other work on the machine got in the way, measured while
the trial runs, and the `quiet` verdict (separate from `valid`).

`valid` says whether the measurement itself worked (the load generator kept its schedule, the
server answered). `quiet` says whether the host left the trial alone. The readings, over the
measured window, become these trials.csv columns:

  noise_steal_pct                      CPU steal on the trial's CPUs (/proc/stat), % of their time
  noise_foreign_cpu_pct                CPU time on the trial's CPUs used by processes that are not
                                       the server's, the load generator's or perfctl's (perfctl
                                       and all it started, e.g. a latency proxy), % of one CPU: the CPUs' elapsed time less idle, steal and interrupt
                                       time (/proc/stat), less our threads' run time (schedstat)
  noise_server_runqueue_wait_ms_per_s  time the server's threads were runnable but waited for a
  noise_loadgen_runqueue_wait_ms_per_s   CPU (/proc/<pid>/task/*/schedstat), ms per second
  noise_runqueue_wait_us_per_request   both summed, per request of the window
  noise_server_involuntary_switches_per_s    threads taken off a CPU while still runnable
  noise_loadgen_involuntary_switches_per_s   (/proc/<pid>/task/*/status)
  noise_loadgen_cpu_others_pct         when the load generator has CPUs of its own: the time
                                       anything else ran on them (perfctl, kernel threads,
                                       other processes), % of one CPU: those CPUs' busy time
                                       (/proc/stat) less the load generator's run time
  noise_cpus                           the CPUs watched: where the server and load generator may run

A trial is not quiet when (thresholds below, reasons in `noise_reasons`):
- steal > MAX_STEAL_PCT: a hypervisor took the CPUs away;
- foreign CPU > MAX_FOREIGN_CPU_PCT of one CPU (or MAX_FOREIGN_SHARE_PCT of the watched CPUs,
  when they are many: an unpinned trial on a big host watches all of them): something else ran
  where the trial runs;
- the load generator waited > MAX_LOADGEN_WAIT_MS_PER_S for its CPU, when it has CPUs of its
  own (pinned apart from the server, at most one worker process per CPU), counting only the
  wait that others could have caused: a thread waits behind whoever runs, so the wait others
  caused is at most the time they ran there (noise_loadgen_cpu_others_pct). The rest is the
  load generator waiting for itself: at its maximum closed-loop rate its event loop and its
  writer thread share one CPU (a C epoll trial at 107k req/s: 58 ms/s of wait, 46 involuntary
  switches/s, others 1% of the CPU, on an idle host). The wait is what the rule adds to
  foreign CPU: it catches perfctl itself (ours, so not foreign) crowding the load generator.
The server's own run-queue wait and involuntary switches are recorded but not judged: a server
with more busy threads than CPUs waits for itself, and that is its performance, not noise.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..proc import procfs
from ..proc.procfs import descendants
from .schedstat import USER_HZ, CpuTicks, read_cpu_ticks, read_process_cpu_ns, read_threads

# Measured on a 2-vCPU VM (server on CPU 0, load generator on CPU 1, closed and open load):
# quiet trials read steal 0-4% (the hypervisor's other guests come and go), foreign CPU 0-2%
# of one CPU (kernel threads, agents) and a load-generator run-queue wait of 0.3-26 ms/s
# (waking an idle vCPU is not free); with a neighbour spinning at 50-60% duty on either CPU,
# foreign CPU read 45-120% and, with it on the load generator's CPU, that wait 220-255 ms/s.
# Each limit sits clear of the quiet readings (a false alarm costs a trial) and well below
# the noisy ones; a few % of steal moves a result by about as much, within run-to-run noise.
MAX_STEAL_PCT = 5.0
MAX_FOREIGN_CPU_PCT = 10.0
MAX_FOREIGN_SHARE_PCT = 5.0
MAX_LOADGEN_WAIT_MS_PER_S = 50.0

OPTIONAL = {"noise_loadgen_cpu_others_pct", "noise_cpus"}  # NaN/empty is not "unmeasured"


class ThreadTotals:
    """Cumulative counters over the threads of a set of processes. A thread keeps the last
    values seen for it after it ends, so the totals never go backwards.

    A thread that starts and ends between two samples (a thread-per-request server's) is never
    seen. Its CPU time is not lost: the kernel adds it to its process's utime + stime, so each
    process also counts `unseen`, what that total holds beyond the threads seen (live or
    ended). The total counts in ticks (10 ms): below a thread's exact schedstat time the
    difference is rounding and counts 0; it never goes backwards either."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[int, int, int]] = {}
        self.seen: dict[int, int] = {}  # pid -> on-CPU ns of its threads seen, at their last
        self.unseen: dict[int, int] = {}

    def update(self, pids) -> None:
        for pid in pids:
            process_ns = read_process_cpu_ns(pid)  # first: the threads read after it are newer
            for tid, values in read_threads(pid).items():
                before = self.last.get(tid, (0, 0, 0))[0]
                self.last[tid] = values
                self.seen[pid] = self.seen.get(pid, 0) + values[0] - before
            if process_ns is not None:
                unseen = process_ns - self.seen.get(pid, 0)
                self.unseen[pid] = max(self.unseen.get(pid, 0), unseen)

    def totals(self) -> tuple[int, int, int]:
        """(on-CPU ns, run-queue wait ns, involuntary switches), summed; the on-CPU time
        includes the threads never seen (their wait and switches are not known)."""
        run, wait, switches = sum(self.unseen.values()), 0, 0
        for r, w, s in self.last.values():
            run, wait, switches = run + r, wait + w, switches + s
        return run, wait, switches


@dataclass(frozen=True)
class NoiseSample:
    """Cumulative counters at one instant (t_ns: perf_counter_ns, the load generator's clock)."""

    t_ns: int
    server: tuple[int, int, int]  # ThreadTotals.totals() of the server's process tree
    loadgen: tuple[int, int, int]  # of the load generator's processes
    own_run_ns: int  # on-CPU ns of perfctl and its other children (a proxy)
    cpus: CpuTicks  # summed over the watched CPUs
    loadgen_cpus: CpuTicks | None = None  # summed over the load generator's own CPUs
    loadgen_cpu_count: int = 0


def sum_ticks(ticks: dict[int, CpuTicks], cpus: set[int]) -> CpuTicks:
    sel = [ticks[c] for c in cpus if c in ticks]
    return CpuTicks(
        idle=sum(t.idle for t in sel), steal=sum(t.steal for t in sel), irq=sum(t.irq for t in sel)
    )


# Set by a local cluster (cluster/local.py) in its scheduler's and workers' environment: the
# pid of the perfctl that started them. Its whole process tree is the run's own work, on this
# one machine: another "host's" load generator is not foreign CPU.
RUN_ROOT_ENV = "PERFCTL_RUN_ROOT"


def own_root() -> int:
    """The process whose tree counts as ours: $PERFCTL_RUN_ROOT when it names a live process
    above this one, else this process."""
    try:
        root = int(os.environ.get(RUN_ROOT_ENV, ""))
    except ValueError:
        return os.getpid()
    pid: int | None = os.getpid()
    for _ in range(64):  # walk up the parents: a stale value names a stranger
        if pid == root:
            return root
        pid = procfs.ppid(pid)
        if pid is None or pid <= 1:
            break
    return os.getpid()


class NoiseProbe:
    """Takes NoiseSamples of the server's and the load generator's processes on `cpus`."""

    def __init__(self, cpus: set[int], loadgen_cpus: set[int] | None = None) -> None:
        """loadgen_cpus: the load generator's own CPUs, when it has some (None: it shares)."""
        self.cpus = set(cpus)
        self.loadgen_cpus = set(loadgen_cpus) if loadgen_cpus else None
        self.root = own_root()
        self.server, self.loadgen, self.own = ThreadTotals(), ThreadTotals(), ThreadTotals()

    def sample(self, t_ns: int, server_pids, loadgen_pids) -> NoiseSample:
        self.server.update(server_pids)
        self.loadgen.update(loadgen_pids)
        trial = set(server_pids) | set(loadgen_pids)
        # the trial's trees are known: the walk of ours does not go below them again
        self.own.update(
            [p for p in (self.root, *(descendants(self.root, trial) or [])) if p not in trial]
        )
        ticks = read_cpu_ticks()
        lg = self.loadgen_cpus
        return NoiseSample(
            t_ns,
            self.server.totals(),
            self.loadgen.totals(),
            self.own.totals()[0],
            sum_ticks(ticks, self.cpus),
            sum_ticks(ticks, lg) if lg else None,
            len(lg) if lg else 0,
        )


def window_samples(
    samples: list[NoiseSample], start_ns: int, end_ns: int
) -> tuple[NoiseSample, NoiseSample] | None:
    """The samples that bracket [start_ns, end_ns): the last at or before the start and the
    first at or after the end (the nearest ones when the sampling began late or ended early).
    None when fewer than two samples span any time."""
    if len(samples) < 2:
        return None
    before = [s for s in samples if s.t_ns <= start_ns]
    after = [s for s in samples if s.t_ns >= end_ns]
    first = before[-1] if before else samples[0]
    last = after[0] if after else samples[-1]
    return (first, last) if last.t_ns > first.t_ns else None


def readings(
    first: NoiseSample, last: NoiseSample, requests: int, window_s: float, cpus: set[int]
) -> dict:
    """The noise columns between two samples (see the module docstring)."""
    dt_s = (last.t_ns - first.t_ns) / 1e9
    d = {
        name: [b - a for a, b in zip(getattr(first, name), getattr(last, name))]
        for name in ("server", "loadgen")
    }
    elapsed_s = dt_s * len(cpus)
    steal_s = (last.cpus.steal - first.cpus.steal) / USER_HZ
    not_running_s = (last.cpus.idle - first.cpus.idle + last.cpus.irq - first.cpus.irq) / USER_HZ
    busy_s = elapsed_s - not_running_s - steal_s
    ours_s = (d["server"][0] + d["loadgen"][0] + last.own_run_ns - first.own_run_ns) / 1e9
    wait_ms_per_s = {k: d[k][1] / 1e6 / dt_s for k in d}
    waited_in_window_us = sum(wait_ms_per_s.values()) * window_s * 1e3
    return {
        "noise_steal_pct": 100.0 * steal_s / elapsed_s if elapsed_s > 0 else 0.0,
        "noise_foreign_cpu_pct": 100.0 * max(0.0, busy_s - ours_s) / dt_s,
        "noise_server_runqueue_wait_ms_per_s": wait_ms_per_s["server"],
        "noise_loadgen_runqueue_wait_ms_per_s": wait_ms_per_s["loadgen"],
        "noise_runqueue_wait_us_per_request": waited_in_window_us / requests
        if requests
        else math.nan,
        "noise_server_involuntary_switches_per_s": d["server"][2] / dt_s,
        "noise_loadgen_involuntary_switches_per_s": d["loadgen"][2] / dt_s,
        "noise_loadgen_cpu_others_pct": _others_on_loadgen_cpus(first, last, d["loadgen"][0], dt_s),
        "noise_cpus": ",".join(map(str, sorted(cpus))),
    }


def _others_on_loadgen_cpus(
    first: NoiseSample, last: NoiseSample, loadgen_run_ns: int, dt_s: float
) -> float:
    """% of one CPU that anything but the load generator ran on its own CPUs (NaN when it
    has none): their busy time less its run time, never below 0."""
    a, b = first.loadgen_cpus, last.loadgen_cpus
    if a is None or b is None or not last.loadgen_cpu_count:
        return math.nan
    elapsed_s = dt_s * last.loadgen_cpu_count
    not_running_s = (b.idle - a.idle + b.irq - a.irq + b.steal - a.steal) / USER_HZ
    return 100.0 * max(0.0, elapsed_s - not_running_s - loadgen_run_ns / 1e9) / dt_s


def columns() -> list[str]:
    """The noise columns of trials.csv, as results/schema.py (their owner) declares them."""
    from ..results.schema import NOISE_COLUMNS  # here: results/ loads pandas, a probe needs none

    return NOISE_COLUMNS


def not_measured() -> dict:
    return {c: (math.nan if c != "noise_cpus" else "") for c in columns()}


def noise_reasons(row: dict, loadgen_has_own_cpus: bool) -> list[str]:
    """Why the host was not quiet during the trial (empty list: it was)."""
    if not all(
        isinstance(row.get(c), (int, float)) and row[c] == row[c]
        for c in columns()
        if c not in OPTIONAL
    ):
        return ["host noise not measured"]
    reasons = []
    if row["noise_steal_pct"] > MAX_STEAL_PCT:
        reasons.append(
            f"CPU steal {row['noise_steal_pct']:.1f}% > {MAX_STEAL_PCT:g}% "
            "(the hypervisor ran other guests)"
        )
    n_cpus = len(str(row["noise_cpus"]).split(","))
    limit = max(MAX_FOREIGN_CPU_PCT, MAX_FOREIGN_SHARE_PCT * n_cpus)
    if row["noise_foreign_cpu_pct"] > limit:
        reasons.append(
            f"other processes used {row['noise_foreign_cpu_pct']:.0f}% of a CPU on "
            f"CPUs {row['noise_cpus']} (> {limit:g}%)"
        )
    wait = row["noise_loadgen_runqueue_wait_ms_per_s"]
    others = row.get("noise_loadgen_cpu_others_pct", math.nan)
    others_ms = others * 10.0 if isinstance(others, (int, float)) and others == others else None
    blamed = wait if others_ms is None else min(wait, others_ms)  # ms/s; 1% of a CPU = 10 ms/s
    if loadgen_has_own_cpus and blamed > MAX_LOADGEN_WAIT_MS_PER_S:
        reasons.append(
            f"load generator waited {wait:.0f} ms/s for its own CPU"
            + ("" if others_ms is None else f" while others ran {others_ms:.0f} ms/s there")
            + f" (> {MAX_LOADGEN_WAIT_MS_PER_S:g} ms/s)"
        )
    return reasons
