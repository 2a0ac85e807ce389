"""Samples a trial while it runs, from a thread of the orchestrator: the server process tree's
CPU, memory and threads (psutil), whether every process of that tree stays alive (TreeWatch),
the host-noise counters of the server and the load generator (NoiseProbe), and the CPU and
memory of each service's process tree (a PostgreSQL postmaster and its backends)."""

from __future__ import annotations

import math
import threading
import time

import pandas as pd
import psutil

from ..proc.tree_watch import TreeWatch, tree_pids
from .noise import NoiseProbe, NoiseSample

SAMPLE_INTERVAL_S = 0.25  # noise readings are taken between the samples nearest the window


class ResourceSampler:
    """Every interval_s: CPU%, RSS and threads summed over the server's process tree, the
    tree's liveness, and a NoiseSample. start() takes the first sample at once; stop() one
    last sample."""

    def __init__(
        self,
        pid: int,
        loadgen_pid: int | None = None,
        cpus: set[int] | None = None,
        interval_s: float = SAMPLE_INTERVAL_S,
        services: dict[str, int] | None = None,
        loadgen_cpus: set[int] | None = None,
    ) -> None:
        """services: name -> pid of each running service's main process; loadgen_cpus: the
        load generator's own CPUs, when it has some (noise.py)."""
        self.pid = pid
        self.services = dict(services or {})
        self.service_samples: dict[str, list[tuple[float, float, float]]] = {
            n: [] for n in self.services
        }  # t, cpu_pct, rss_mb
        self._service_procs: dict[int, psutil.Process] = {}  # keeps cpu_percent's baseline
        self.loadgen_pid = loadgen_pid
        self.interval_s = interval_s
        self.samples: list[tuple[float, float, float, int]] = []  # t, cpu_pct, rss_mb, threads
        self.sample_ns: list[int] = []  # perf_counter_ns of each entry of samples
        self.noise: list[NoiseSample] = []
        self.watch = TreeWatch(pid)
        self.probe = NoiseProbe(cpus if cpus is not None else set(), loadgen_cpus)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._t0 = time.monotonic()

    def start(self) -> ResourceSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self._tick(resources=False)

    def _tick(self, resources: bool = True) -> None:
        t_ns = time.perf_counter_ns()
        procs = self.watch.tree()
        self.watch.observe(procs, t_ns)
        loadgen = tree_pids(self.loadgen_pid) if self.loadgen_pid is not None else []
        self.noise.append(self.probe.sample(t_ns, [p.pid for p in procs], loadgen))
        if not resources:
            return
        cpu = rss = 0.0
        threads = 0
        for p in procs:
            try:
                with p.oneshot():
                    cpu += p.cpu_percent(None)
                    rss += p.memory_info().rss / 2**20
                    threads += p.num_threads()
            except psutil.Error:
                pass
        t = time.monotonic() - self._t0
        self.samples.append((t, cpu, rss, threads))
        self.sample_ns.append(t_ns)
        for name, pid in self.services.items():
            self.service_samples[name].append((t, *self._tree_usage(pid)))

    def _tree_usage(self, pid: int) -> tuple[float, float]:
        """(CPU %, RSS MiB) summed over pid and its descendants."""
        try:
            root = self._service_procs.setdefault(pid, psutil.Process(pid))
            pids = [pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.Error:
            return math.nan, math.nan
        cpu = rss = 0.0
        for p in pids:
            try:
                proc = self._service_procs.get(p)
                if proc is None:
                    proc = self._service_procs[p] = psutil.Process(p)
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss / 2**20
            except psutil.Error:
                self._service_procs.pop(p, None)
        return cpu, rss

    def _loop(self) -> None:
        self._tick()
        while not self._stop.wait(self.interval_s):
            self._tick()

    def _in_window(self, window_ns: tuple[int, int] | None) -> list[int]:
        """Indexes of the samples whose interval (each CPU% covers the time since the sample
        before it) lies in the measured window; every sample after the first when the window
        is unknown or holds none (a window shorter than the interval)."""
        n = len(self.samples)
        if window_ns is not None:
            lo, hi = window_ns
            step = int(self.interval_s * 1e9)
            got = [
                i
                for i in range(1, n)
                if self.sample_ns[i - 1] >= lo - step // 2 and self.sample_ns[i] <= hi + step // 2
            ]
            if got:
                return got
        return list(range(1, n)) or list(range(n))

    def summary(self, window_ns: tuple[int, int] | None = None) -> dict:
        """server_cpu_pct (mean over the samples of the measured window, perf_counter_ns
        (start, end), not the start-up, warm-up and drain around it), server_rss_mb (max),
        threads (max); per service NAME: service_NAME_cpu_pct (mean, same window) and
        service_NAME_rss_mb (max)."""
        idx = self._in_window(window_ns)
        out = {"server_cpu_pct": math.nan, "server_rss_mb": math.nan, "server_threads_max": 0}
        if idx:
            s = [self.samples[i] for i in idx]
            out = {
                "server_cpu_pct": sum(x[1] for x in s) / len(s),
                "server_rss_mb": max(x[2] for x in self.samples),
                "server_threads_max": max(x[3] for x in self.samples),
            }
        for name, samples in self.service_samples.items():
            got = [samples[i] for i in idx if i < len(samples) and samples[i][1] == samples[i][1]]
            out[f"service_{name}_cpu_pct"] = sum(x[1] for x in got) / len(got) if got else math.nan
            out[f"service_{name}_rss_mb"] = max(
                (x[2] for x in samples[1:] if x[2] == x[2]), default=math.nan
            )
        return out

    def frame(self) -> pd.DataFrame:
        """One row per sample: the server's columns, then service_NAME_{cpu_pct,rss_mb}."""
        df = pd.DataFrame(self.samples, columns=["t_s", "cpu_pct", "rss_mb", "threads"])
        for name, samples in self.service_samples.items():
            if len(samples) == len(df):
                df[f"service_{name}_cpu_pct"] = [x[1] for x in samples]
                df[f"service_{name}_rss_mb"] = [x[2] for x in samples]
        return df
