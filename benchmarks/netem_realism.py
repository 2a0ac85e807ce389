"""The emulation's realism (netem_accuracy.py's `loss` and `schedule` parts): Gilbert-Elliott
loss measured as one-way delays through the proxy against the chain's rate and bursts, and a
mid-trial schedule end to end (`perfctl run`): when each step took effect against its `at`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from netem_kit import ROOT, StatsProxy  # first: it puts the repo root on sys.path

from orchestrator.netem.expected import loss_sampling_interval


def gilbert_elliott(binary, q, row):
    """One-way frames through the proxy to a sink thread: loss rate and mean burst length."""
    import struct
    import threading

    from orchestrator.experiment.network import GilbertElliott

    ge = GilbertElliott(p=0.02, r=0.25, loss_bad=0.9, loss_good=0.005)
    frame = struct.Struct("!qq")
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    owd: dict[int, float] = {}

    def sink():
        c, _ = ls.accept()
        buf = b""
        while True:
            b = c.recv(65536)
            now = time.perf_counter_ns()
            if not b:
                return
            buf += b
            while len(buf) >= frame.size:
                i, t0 = frame.unpack_from(buf)
                owd[i] = (now - t0) / 1e6
                buf = buf[frame.size :]

    threading.Thread(target=sink, daemon=True).start()
    # spaced wider than delay + rto, so each frame's delay is its own; a frame is "held" when
    # it arrives more than rto/2 late (host stalls of a few ms stay below that)
    n = 300 if q else 3000
    p = StatsProxy(
        [
            binary,
            "--listen",
            "127.0.0.1:0",
            "--to",
            f"127.0.0.1:{ls.getsockname()[1]}",
            "--delay",
            "1ms",
            "--rto",
            "20ms",
            "--threads",
            "1",
            "--gemodel",
            f"{ge.p},{ge.r},{ge.loss_bad},{ge.loss_good}",
        ]
    )
    try:
        s = socket.create_connection(("127.0.0.1", p.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(n):
            s.sendall(frame.pack(i, time.perf_counter_ns()))
            time.sleep(0.023)
        t_end = time.monotonic() + 5
        while len(owd) < n and time.monotonic() < t_end:
            time.sleep(0.01)
        held = p.stats().get("held_up")
        s.close()
    finally:
        p.stop()
        ls.close()
    lost = np.array([owd.get(i, 1e9) > 1.0 + 10.0 for i in range(n)])
    edges = np.diff(np.r_[0, lost.astype(int), 0])
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    rate, burst = lost.mean(), runs.mean() if runs.size else 0.0
    # the verdict: is the measurement one that n chunks of the configured chain show 99% of
    # the time? (a fixed tolerance around the long-run value fails a correct chain often:
    # n=3000 here holds only ~55 bad spells)
    (r_lo, r_hi), (b_lo, b_hi) = loss_sampling_interval(ge, n)
    row(
        f"Gilbert-Elliott loss rate (n={n} one-way chunks)",
        f"{rate * 100:.2f}% vs {ge.loss_rate() * 100:.2f}% (n={n}: 99% in {r_lo * 100:.2f}-{r_hi * 100:.2f}%)",
        "in the 99% band",
        r_lo <= rate <= r_hi,
    )
    row(
        "Gilbert-Elliott mean burst length",
        f"{burst:.2f} vs {ge.mean_burst():.2f} chunks (99% in {b_lo:.2f}-{b_hi:.2f})",
        "in the 99% band",
        b_lo <= burst <= b_hi,
    )
    if held is not None:
        row(
            "Gilbert-Elliott: chunks the proxy held vs seen held",
            f"{held} vs {int(lost.sum())}",
            "(info)",
            True,
        )


SCHEDULE_YAML = """
name: netem-schedule-bench
servers:
  py: {impl: python, model: async}
workload: {path: /work}
load: {mode: closed, connections: 4, duration: 5s, warmup: 1s}
network: {delay: 1ms, schedule: [{at: 2500ms, delay: 20ms}, {at: 4s, delay: 1ms}]}
"""


def schedule_end_to_end(tmp: Path, row):
    """perfctl run of a tiny experiment whose network changes at 2.5 s: the change in the
    timeline and the first request that crossed the new delay, vs 2.5 s."""
    import pandas as pd

    (tmp / "sched.yaml").write_text(SCHEDULE_YAML)
    out = tmp / "sched-run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(tmp / "sched.yaml"),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if proc.returncode != 0:
        row("schedule: perfctl run", f"exit {proc.returncode}", "exit 0", False)
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        return
    tdir = next((out / "cells").glob("*/trial-*"))
    change = json.loads((tdir / "network_changes.json").read_text())["changes"][0]
    tl = pd.read_parquet(tdir / "timeline.parquet")
    in_tl = tl["network_change_s"].dropna()
    req = pd.read_parquet(tdir / "requests.parquet")
    start = json.loads((tdir / "summary.json").read_text())["start_ns"]
    sent_s = (req["sent_ns"] - start) / 1e9
    lat = (req["done_ns"] - req["sent_ns"]) / 1e6
    seen = sent_s[(lat >= 40 * 0.95) & (sent_s > 1.0)].min()
    err_tl = (float(in_tl.iloc[0]) - 2.5) * 1e3 if len(in_tl) else float("nan")
    row(
        "schedule at 2.5s: change in the timeline",
        f"{float(in_tl.iloc[0]):.4f} s ({err_tl:+.1f} ms)" if len(in_tl) else "missing",
        "|err| <= 100 ms",
        abs(err_tl) <= 100,
    )
    row(
        "schedule at 2.5s: first request over new delay",
        f"sent {seen:.4f} s ({(seen - 2.5) * 1e3:+.1f} ms)",
        "|err| <= 100 ms",
        abs(seen - 2.5) <= 0.1,
    )
    row(
        "schedule at 2.5s: applied vs due (proxy)",
        f"{(change['applied_s'] - change['due_s']) * 1e3:+.2f} ms",
        "(info)",
        True,
    )
    # the step down at 4 s (issue 20: a +233 ms wait was once seen after a change, on a host
    # whose CPU pressure was ~90%): a request sent after it may wait behind what was sent
    # under 20 ms (at most until that is due), never longer. The bar is the worst
    # send-to-done of the steady 1 ms stretch before 2.5 s (this host's noise) + 5 ms
    down = json.loads((tdir / "network_changes.json").read_text())["changes"][1]["applied_s"]
    steady = lat[(sent_s > 1.2) & (sent_s < change["applied_s"] - 0.1)]
    held_until = sent_s[sent_s < down].max() + 2 * 0.020
    after = (sent_s > down + 0.001) & (sent_s < down + 0.3)
    excess = lat[after] - np.maximum(held_until - sent_s[after], 0.0) * 1e3
    worst = float(excess.max()) if after.any() else float("nan")
    bar = float(steady.max()) if len(steady) else float("nan")
    row(
        "schedule step down at 4s: worst wait past the held requests",
        f"{worst:.2f} ms (n={int(after.sum())})",
        f"<= steady max + 5 = {bar + 5:.2f} ms",
        worst <= bar + 5,
    )
