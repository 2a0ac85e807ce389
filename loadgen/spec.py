"""LoadSpec: everything one load phase needs, in plain units (seconds, requests/s)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from .fields import RequestSpec

# timed sends on CPUs of the generator's own poll all they like (wake.py: a budget of 1 is
# busy-polling up to each send): set by the orchestrator in spin_budget when the generator is
# pinned apart from the server
OWN_CPU_SPIN_BUDGET = 1.0

MODES = ("closed", "open", "burst", "ramp")
ARRIVALS = ("poisson", "constant", "uniform")
THINK_DISTS = ("fixed", "exp")
EXIT_CANNOT_WRITE = 3  # exit status of `python -m loadgen` when OUT_DIR cannot be written


def measured_window_s(
    mode: str,
    duration_s: float,
    bursts: int,
    burst_interval_s: float,
    ramp_steps: int,
    ramp_step_s: float,
) -> float:
    """The measured time of one load phase: `duration_s`, all bursts, or all ramp steps. The
    one definition: LoadSpec and the experiment's `load:` block both use it."""
    if mode == "burst":
        return bursts * burst_interval_s
    if mode == "ramp":
        return ramp_steps * ramp_step_s
    return duration_s


def keep_fraction(records: str) -> float:
    """`all` -> 1.0, `none` -> 0.0, `sample:F` -> F (0 < F <= 1); ValueError otherwise."""
    if records == "all":
        return 1.0
    if records == "none":
        return 0.0
    kind, _, value = str(records).partition(":")
    try:
        fraction = float(value)
    except ValueError:
        fraction = math.nan
    if kind != "sample" or not 0.0 < fraction <= 1.0:
        raise ValueError(
            f"records must be all, none or sample:FRACTION with 0 < FRACTION "
            f"<= 1 (e.g. sample:0.01), not {records!r}"
        )
    return fraction


@dataclass(frozen=True)
class LoadSpec:
    """One load phase against one HTTP/1.1 endpoint.

    Times are seconds; `rate_rps` is requests per second (open mode only). The measured window
    is [warmup_s, warmup_s + duration_s) after the start instant; requests intended before
    warmup_s are kept but flagged as warm-up.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    target: str = "/"  # path plus query, sent as the request target
    method: str = "GET"
    body: bytes | str = b""
    headers: tuple[tuple[str, str], ...] = ()
    mode: str = "closed"  # closed | open | burst | ramp (see modes/)
    connections: int = 1
    think_time_s: float = 0.0  # closed: pause after each response
    think_dist: str = "fixed"  # fixed | exp
    rate_rps: float = 0.0  # open: target arrival rate
    arrivals: str = "poisson"  # open: poisson | constant | uniform
    max_outstanding: int = (
        0  # open: arrivals past this many queued+in flight are dropped (0 = 100 x connections)
    )
    duration_s: float = 10.0
    warmup_s: float = 0.0
    # warmup: auto: before the phase, load in unrecorded slices until the server is steady,
    # at most this long (prewarm.py; the RMI driver likewise); 0: off
    warmup_auto_max_s: float = 0.0
    timeout_s: float = 5.0  # a request not answered by then counts as a timeout error
    keepalive: bool = True  # False: a new connection per request
    seed: int = 1
    cpus: tuple[int, ...] = ()  # pin the worker to these CPUs (empty: no pinning)
    max_requests: int = 50_000_000  # hard bound on requests per phase, whatever the rate
    processes: int = 1  # worker processes, each one uvloop loop, schedule split
    bursts: int = 1  # burst: how many releases of `connections` new connections
    burst_interval_s: float = 1.0  # burst: time between releases
    ramp_rates: tuple[float, ...] = ()  # ramp: arrival rates to step through, ascending
    ramp_step_s: float = 5.0  # ramp: measured seconds per step (warm-up once, first)
    slo_p99_ms: float = 10.0  # ramp: a step meets the SLO when p99 < this ...
    slo_error_rate: float = 0.001  # ... and its error rate < this
    start_at_ns: int = 0  # common start instant (perf_counter_ns) for several workers
    shard_index: int = 0  # open: this worker sends arrivals shard_index, +shard_count, ...
    shard_count: int = 1  # ... of the whole schedule (schedule.shard)
    schedule_file: str = ""  # open: the schedule as a file, for drivers (DRIVER.md)
    records: str = "all"  # requests.parquet: all | sample:FRACTION | none (keep_fraction)
    early_wake_ns: int = 0  # timed sends: the first early wake-up (wake.py; 0: its default)
    spin_budget: float = 0.0  # timed sends: share of a CPU polling may take (wake.py; 0: 25%,
    # 1: busy-poll up to each send)
    # a mix (mix.py): when set, requests are drawn from it (target/method/body unused) and
    # `headers` go on every one of them
    requests: tuple[RequestSpec, ...] = ()
    replay_file: str = ""  # requests read from this file (replay.py), looping; else none
    replay_order: str = "order"  # order | shuffle
    replay_names: tuple[str, ...] = ()  # the replay file's endpoints (replay.scan), in order
    # HTTPS (tls.py): TLS 1.3 on every connection, verified against tls_ca_file (empty: the
    # system's CAs) unless tls_verify is False; tls_resume offers the last session's ticket on
    # each new connection; tls_server_name is the name checked and sent as SNI (empty: host)
    tls: bool = False
    tls_ca_file: str = ""
    tls_verify: bool = True
    tls_resume: bool = True
    tls_server_name: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals must be one of {ARRIVALS}, not {self.arrivals!r}")
        if self.think_dist not in THINK_DISTS:
            raise ValueError(f"think_dist must be one of {THINK_DISTS}, not {self.think_dist!r}")
        if self.connections < 1:
            raise ValueError("connections must be >= 1")
        if self.mode == "open" and self.rate_rps <= 0:
            raise ValueError("open mode needs rate_rps > 0")
        if self.mode == "ramp" and (not self.ramp_rates or min(self.ramp_rates) <= 0):
            raise ValueError("ramp mode needs ramp_rates, all > 0")
        if self.duration_s <= 0:
            raise ValueError("duration_s must be > 0")
        if self.processes < 1 or self.bursts < 1:
            raise ValueError("processes and bursts must be >= 1")
        if not 0 <= self.shard_index < self.shard_count:
            raise ValueError("shard_index must be in [0, shard_count)")
        keep_fraction(self.records)
        if self.replay_order not in ("order", "shuffle"):
            raise ValueError(f"replay_order must be order or shuffle, not {self.replay_order!r}")

    @property
    def keep_fraction(self) -> float:
        """The share of request rows written to requests.parquet (1: all, 0: none)."""
        return keep_fraction(self.records)

    @property
    def templated(self) -> bool:
        """True when requests differ: a mix, a replay, or {seq} in the target or body."""
        if self.requests or self.replay_file:
            return True
        return "{seq}" in self.target or b"{seq}" in self.body_bytes()

    @property
    def window_s(self) -> float:
        """Length of the measured window (burst: all releases; ramp: all steps)."""
        return measured_window_s(
            self.mode,
            self.duration_s,
            self.bursts,
            self.burst_interval_s,
            len(self.ramp_rates),
            self.ramp_step_s,
        )

    @property
    def outstanding_cap(self) -> int:
        return self.max_outstanding or 100 * self.connections

    def body_bytes(self) -> bytes:
        return self.body.encode() if isinstance(self.body, str) else self.body

    def to_json(self) -> str:
        d = asdict(self)
        d["body"] = self.body_bytes().decode("latin-1")
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> LoadSpec:
        d = json.loads(text)
        d["body"] = d.get("body", "").encode("latin-1")
        d["headers"] = tuple(tuple(h) for h in d.get("headers", ()))
        d["cpus"] = tuple(d.get("cpus", ()))
        d["ramp_rates"] = tuple(d.get("ramp_rates", ()))
        d["replay_names"] = tuple(d.get("replay_names", ()))
        d["requests"] = tuple(
            RequestSpec(**{**r, "headers": tuple(tuple(h) for h in r.get("headers", ()))})
            for r in d.get("requests", ())
        )
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> LoadSpec:
        return cls.from_json(Path(path).read_text())
