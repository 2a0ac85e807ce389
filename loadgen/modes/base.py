"""Mode: what every load mode offers, and what a mode does unless it says otherwise.

A load mode decides when requests are issued and what becomes of a connection after an
answer. The Worker (worker.py) owns the loop, the connections, the records and the
self-checks, and calls its mode at six points:

    start(worker)              connections are open, the start instant is near: plan
                               the first requests (worker.at schedules them)
    on_answer(worker, conn)    a response completed on conn while requests are issued
    on_lost(worker, conn)      one of the worker's connections closed while issuing
    stop(worker)               issuing is over: end the requests queued but not sent
    expire(worker, limit_ns, error)
                               end the attempts the mode holds outside connections
                               (connects under way) begun before limit_ns
    summary_extra(worker)      the mode's entries in the summary

parallel.generate_to_dir asks a mode for `processes`, `share(...)` and `generate(sink)`.
worker.ModeHooks declares the part of a mode the Worker calls, so worker.py imports no mode.

A mode object holds the state of one load phase (schedules, queues, connects under way):
one object drives one Worker once. Modes use only the Worker's public names.
"""

from __future__ import annotations

import dataclasses

from ..phase import generate as generate_phase
from ..sink import ParquetSink
from ..spec import LoadSpec
from ..worker import Worker

RECONNECT_PAUSE_S = 0.010  # between attempts to replace a lost connection

# The schedule entries of a summary, for modes that follow no arrival schedule.
NO_SCHEDULE = {
    "scheduled_in_window": 0,
    "dropped": 0,
    "send_lateness_p50_ms": 0.0,
    "send_lateness_p99_ms": 0.0,
    "send_lateness_max_ms": 0.0,
}


class Mode:
    name = ""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.keepalive = spec.keepalive
        # Connection.on_message_complete may send the next request itself (the fast path)
        self.sends_next_inline = False

    # --- generating to files (parallel.py) ----------------------------------------------
    @property
    def processes(self) -> int:
        """How many worker processes share this load."""
        return self.spec.processes

    def share(self, index: int, count: int, start_at_ns: int) -> Mode:
        """The part of this load for worker process `index` of `count`, all starting at
        start_at_ns: the connections and the outstanding cap divided, its own seed and CPU."""
        spec = self.spec
        share = spec.connections // count + (1 if index < spec.connections % count else 0)
        cpus = (spec.cpus[index % len(spec.cpus)],) if spec.cpus else ()
        part = dataclasses.replace(
            spec,
            connections=max(1, share),
            cpus=cpus,
            seed=spec.seed * 1009 + index,
            processes=1,
            start_at_ns=start_at_ns,
            max_outstanding=max(1, spec.outstanding_cap // count),
            shard_index=index,  # a mix's stream of generated values (mix.Feed)
            shard_count=count,
        )
        return type(self)(part)

    def generate(self, sink: ParquetSink, seq_base: int = 0, live=None) -> dict:
        """Generate this load in this process, every row written to sink; the summary.
        live: a live.LiveStats for the per-second file (None: none)."""
        rec, summary = generate_phase(self, sink, seq_base, live)
        sink.close_chunks(rec)
        return summary

    # --- on the Worker's loop ------------------------------------------------------------
    def start(self, worker: Worker) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not drive a Worker")

    def on_answer(self, worker: Worker, conn) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not drive a Worker")

    def on_lost(self, worker: Worker, conn) -> None:
        pass

    def stop(self, worker: Worker) -> None:
        pass

    def drain(self, worker: Worker, conn) -> bool:
        """After issuing stopped, conn answered: True if the mode sent it another request
        (an arrival of the window still waiting for a connection)."""
        return False

    def expire(self, worker: Worker, limit_ns: int, error: int) -> None:
        pass

    def summary_extra(self, worker: Worker) -> dict:
        return dict(NO_SCHEDULE)
