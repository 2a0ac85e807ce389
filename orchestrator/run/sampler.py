"""Samples a server process tree's CPU, memory and threads while a trial runs (psutil)."""
from __future__ import annotations

import threading
import time

import pandas as pd
import psutil


class ResourceSampler:
    """Every interval_s, sum CPU%, RSS and threads over the process and its children."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[tuple[float, float, float, int]] = []  # t, cpu_pct, rss_mb, threads
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._procs: dict[int, psutil.Process] = {}

    def start(self) -> "ResourceSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        out = []
        for p in procs:     # keep Process objects so cpu_percent measures since last call
            out.append(self._procs.setdefault(p.pid, p))
        return out

    def _loop(self) -> None:
        t0 = time.monotonic()
        for p in self._tree():
            try:
                p.cpu_percent(None)
            except psutil.Error:
                pass
        while not self._stop.wait(self.interval_s):
            cpu = rss = 0.0
            threads = 0
            for p in self._tree():
                try:
                    with p.oneshot():
                        cpu += p.cpu_percent(None)
                        rss += p.memory_info().rss / 2**20
                        threads += p.num_threads()
                except psutil.Error:
                    pass
            self.samples.append((time.monotonic() - t0, cpu, rss, threads))

    def summary(self) -> dict:
        """server_cpu_pct (mean of samples after the first), server_rss_mb (max), threads (max)."""
        s = self.samples[1:] or self.samples
        if not s:
            return {"server_cpu_pct": float("nan"), "server_rss_mb": float("nan"),
                    "server_threads_max": 0}
        return {"server_cpu_pct": sum(x[1] for x in s) / len(s),
                "server_rss_mb": max(x[2] for x in s),
                "server_threads_max": max(x[3] for x in s)}

    def frame(self):
        return pd.DataFrame(self.samples, columns=["t_s", "cpu_pct", "rss_mb", "threads"])
