"""A host cut off during a trial, seen from its shard's own records: a stretch of the load in
which that shard completed nothing although it had requests due, while every other shard kept
completing its own. This is what a link cut on a load-generator host looks like anywhere (a
cable, a switch port, `ip link set down` in a local cluster's namespace): it needs no access to
the network, only the rows every shard records.

Completions are counted per host in STALL_BIN_NS bins of the merged requests.parquet (its times
are in one clock: merge.py shifts each shard's so their start instants coincide, to within the
clocks' uncertainty, milliseconds). A bin is *stalled* for a host when nothing completed there
(answers and errors alike) and a request of that host was outstanding at its end (intended,
not yet done): open loop and closed loop alike, nothing was due is not a stall.

A stall counts when it is longer than the host's bound, max(STALL_MIN_S, STALL_RATE_GAPS / r)
with r the host's completions per second over the window. Why: completions of an open-loop
shard at rate r come roughly as a Poisson stream, so a given gap exceeds k / r with probability
e^-k; with k = 50 even a day-long window at 1e6 rps (1e11 gaps) sees one by chance with
probability 1e-11 * e^(-50 + 25) ~ 0. The floor of 1 s is above what a healthy host produces
without losing its link: one lost SYN is retransmitted after 1 s, a lost segment after the
200 ms minimum RTO, a busy 2-core host stalls a shard for tens of milliseconds.

What is not a cut: a pause of the server (a GC, a stop-the-world), or a slow server, stalls
every shard at once; so a stall counts only when every other shard completed at least half
of what it had intended in the same stretch. With one shard there is nothing to compare with
and no verdict (a cut and a server pause look the same from one host). A cut of the server's
own host also stalls every shard: the other checks (the server's liveness, the error rate)
speak for it. A shard's own pause (its loop blocked) is its own self-check's (loop lag).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

STALL_BIN_NS = 10_000_000  # 10 ms: the resolution of an outage's length
STALL_MIN_S = 1.0
STALL_RATE_GAPS = 50.0
OTHERS_KEPT = 0.5  # the share of its due requests another shard must have completed


def cut_off_reasons(
    requests: Path,
    hosts: list[str],
    start_ns: int,
    measure_start_ns: int,
    measure_end_ns: int,
) -> list[str]:
    """One reason per host of `hosts` cut off during the load (see the module docstring),
    from the merged requests.parquet of a trial (times in the clock of the start_ns,
    measure_start_ns and measure_end_ns given: the first shard's). Only stalls that reach
    into the measured window [measure_start_ns, measure_end_ns) count. Reads the file one
    batch at a time; memory is a few arrays of (end - start) / STALL_BIN_NS per host."""
    if len(hosts) < 2 or not requests.is_file() or measure_end_ns <= start_ns:
        return []
    counts = _bins(requests, hosts, start_ns, measure_end_ns)
    window_s = (measure_end_ns - measure_start_ns) / 1e9
    first_window_bin = (measure_start_ns - start_ns) // STALL_BIN_NS
    reasons = []
    for h in hosts:
        done, due, intended = counts[h]
        stalled = (done == 0) & (due > 0)
        lo, hi = _longest_run(stalled, first_window_bin)
        if hi <= lo:
            continue
        rate_rps = done[first_window_bin:].sum() / window_s
        bound_s = max(STALL_MIN_S, STALL_RATE_GAPS / rate_rps) if rate_rps > 0 else STALL_MIN_S
        length_s = (hi - lo) * STALL_BIN_NS / 1e9
        if length_s <= bound_s:
            continue
        others = [o for o in hosts if o != h]
        went_on = all(
            counts[o][2][lo:hi].sum() > 0
            and counts[o][0][lo:hi].sum() >= OTHERS_KEPT * counts[o][2][lo:hi].sum()
            for o in others
        )
        if not went_on:
            continue
        inside_s = (hi - max(lo, first_window_bin)) * STALL_BIN_NS / 1e9
        where = (
            "during the measure window"
            if lo >= first_window_bin
            else f"during the load ({inside_s:.1f} s of it in the measure window)"
        )
        reasons.append(
            f"host {h} was cut off for {length_s:.1f} s {where}: its shard completed "
            f"nothing with requests due while {', '.join(others)} went on (bound "
            f"{bound_s:.1f} s, cluster/stalls.py)"
        )
    return reasons


def _bins(requests: Path, hosts: list[str], start_ns: int, end_ns: int) -> dict:
    """host -> (completions, outstanding at the bin's end, intended) per bin of
    [start_ns, end_ns)."""
    n = int((end_ns - start_ns + STALL_BIN_NS - 1) // STALL_BIN_NS)
    done = {h: np.zeros(n, np.int64) for h in hosts}
    change = {h: np.zeros(n + 1, np.int64) for h in hosts}
    intended = {h: np.zeros(n, np.int64) for h in hosts}
    f = pq.ParquetFile(requests)
    for batch in f.iter_batches(columns=["host", "intended_ns", "done_ns"], batch_size=1 << 16):
        host = batch.column("host").to_numpy(zero_copy_only=False)
        t_i = batch.column("intended_ns").to_numpy()
        t_d = batch.column("done_ns").to_numpy()
        for h in hosts:
            m = host == h
            if not m.any():
                continue
            bi = (t_i[m] - start_ns) // STALL_BIN_NS
            finished = t_d[m] > 0
            bd = np.where(finished, (t_d[m] - start_ns) // STALL_BIN_NS, n)
            keep = (bi >= 0) & (bi < n)
            intended[h] += np.bincount(bi[keep], minlength=n)[:n]
            change[h] += np.bincount(bi[keep], minlength=n + 1)[: n + 1]
            ended = keep & (bd < n)
            change[h] -= np.bincount(np.maximum(bd[ended], 0), minlength=n + 1)[: n + 1]
            got = finished & (bd >= 0) & (bd < n)
            done[h] += np.bincount(bd[got], minlength=n)[:n]
    return {h: (done[h], np.cumsum(change[h])[:n], intended[h]) for h in hosts}


def _longest_run(flags: np.ndarray, reach: int) -> tuple[int, int]:
    """[lo, hi) of the longest run of True in flags that ends after index `reach`
    ((0, 0) when none does)."""
    padded = np.concatenate([[False], flags, [False]])
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    starts, ends = edges[::2], edges[1::2]
    ok = ends > reach
    if not ok.any():
        return 0, 0
    starts, ends = starts[ok], ends[ok]
    k = int(np.argmax(ends - starts))
    return int(starts[k]), int(ends[k])
