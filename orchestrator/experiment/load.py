"""The `workload:` and `load:` blocks, and the one conversion into the load generator's LoadSpec.

`perfctl run` (one per trial) and `perfctl load URL` both describe load with these models and
turn them into a `loadgen.spec.LoadSpec` through `to_load_spec`; nothing else builds a LoadSpec.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from loadgen.spec import LoadSpec, keep_fraction, measured_window_s

from . import units
from .base import FrozenModel, Seconds
from .catalogue import DRIVERS
from .workload import Workload, replay_names, replay_path, resolved_mix

AUTO_PHASE_WARMUP_S = 1.0  # warmup: auto: the phase's own warm-up, once the server is steady
AUTO_MAX_S = 60.0  # warmup: auto: the longest warming up, unless warmup_auto_max says


class Slo(FrozenModel):
    """What a ramp step must meet for its rate to count as sustainable."""

    p99_ms: float = Field(10.0, gt=0, description="a ramp step meets the SLO when p99 < this")
    error_rate: float = Field(
        0.001, ge=0, le=1, description="... and its error rate is below this fraction"
    )

    @field_validator("p99_ms", mode="before")
    @classmethod
    def _ms(cls, v: Any) -> float:
        return units.duration_ms(v) if isinstance(v, str) else v


class Ramp(FrozenModel):
    """Ramp mode: open-loop steps at these rates until the SLO breaks."""

    rates: list[float] = Field(
        min_length=1, description="arrival rates per second to step through (sorted ascending)"
    )
    step_s: Seconds = Field(5.0, alias="step", gt=0, description="measured time of each step")
    slo: Slo = Field(Slo(), description="what a step must meet for its rate to be sustainable")

    @field_validator("rates")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if min(v) <= 0:
            raise ValueError("every ramp rate must be > 0")
        return sorted(v)


class DriverCommand(FrozenModel):
    """Any program that honours loadgen/DRIVER.md: `{spec}` becomes the spec.json path and
    `{out}` the directory it writes requests and summary.json into."""

    cmd: str = Field(
        description="the program's command line; must contain {spec} and {out}",
    )

    @field_validator("cmd")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        missing = [p for p in ("{spec}", "{out}") if p not in v]
        if missing:
            raise ValueError(
                f"a driver command must contain {' and '.join(missing)}: perfctl "
                "puts the spec.json path in {spec} and the output directory in "
                '{out}, e.g. cmd: "./mydriver {spec} {out}" (loadgen/DRIVER.md)'
            )
        return v

    @property
    def label(self) -> str:
        return "cmd"


class Load(FrozenModel):
    """How the load is driven: which driver, which mode, how much and for how long. The load
    generator gets it as a LoadSpec, built in one place (`to_load_spec`)."""

    driver: str | DriverCommand = Field(
        "http",
        description="http (the asyncio generator), a bundled driver by name (rmi), "
        'or {cmd: "prog {spec} {out}"}: loadgen/DRIVER.md',
    )
    mode: Literal["closed", "open", "burst", "ramp"] = Field(
        "closed",
        description="closed: N connections send, wait, think, send again; open: arrivals "
        "on a seeded schedule; burst: N new connections released together; ramp: open-loop "
        "steps until the SLO breaks",
    )
    connections: int = Field(
        1,
        ge=1,
        le=100_000,
        description="closed: concurrent clients; open: the connection pool; burst: "
        "connections per release",
    )
    think_time_s: Seconds = Field(
        0.0, alias="think_time", description="closed: pause after each response"
    )
    think: Literal["fixed", "exp"] = Field(
        "fixed", description="closed: think time fixed, or exponential with that mean"
    )
    rate_rps: float | None = Field(
        None, alias="rate", gt=0, description="open: arrivals per second (required there)"
    )
    arrivals: Literal["poisson", "constant", "uniform"] = Field(
        "poisson", description="open: the law of the gaps between arrivals"
    )
    max_outstanding: int = Field(
        0,
        ge=0,
        description="open: arrivals past this many queued and in flight are counted as "
        "dropped (0: 100 x connections)",
    )
    duration_s: Seconds = Field(
        10.0, alias="duration", gt=0, le=24 * 3600, description="the measured window"
    )
    warmup_s: Seconds = Field(
        2.0,
        alias="warmup",
        le=3600,
        description="load before the measured window, not measured; auto: first load in "
        "unrecorded slices until the server (and a JIT driver) is steady, at most "
        "`warmup_auto_max`, then 1 s",
    )
    warmup_auto_max_s: Seconds = Field(
        0.0,
        alias="warmup_auto_max",
        ge=0,
        le=600,
        description="warmup: auto warms up at most this long (default 60 s; 0: auto is off)",
    )
    timeout_s: Seconds = Field(
        5.0, alias="timeout", gt=0, description="a request unanswered by then is a timeout error"
    )
    keepalive: bool = Field(True, description="false: a new connection per request")
    tls_resume: bool = Field(
        True,
        description="HTTPS (a server with `tls: true`): each new connection offers the "
        "session ticket of an earlier one (TLS 1.3 resumption, `tls_resumed` in the summary); "
        "false: a full handshake on every connection",
    )
    seed: int = Field(
        1, description="mixed into every trial's seed (a hash of cell id, trial and this)"
    )
    processes: int = Field(1, ge=1, le=64, description="load-generator worker processes")
    bursts: int = Field(1, ge=1, le=10_000, description="burst: releases of `connections`")
    burst_interval_s: Seconds = Field(
        1.0, alias="burst_interval", gt=0, description="burst: time between releases"
    )
    ramp: Ramp | None = Field(None, description="ramp: the steps and the SLO (required there)")
    records: str = Field(
        "all",
        description="requests.parquet keeps all | sample:FRACTION | "
        "none of the requests; summaries come from every request either way",
    )

    @model_validator(mode="before")
    @classmethod
    def _auto_warmup(cls, data: Any) -> Any:
        """warmup: auto -> a 1-s warm-up in the phase, after warming up until steady (at most
        warmup_auto_max, 60 s unless given): loadgen/prewarm.py, the RMI driver's prewarm."""
        if isinstance(data, dict) and str(data.get("warmup", "")).strip().lower() == "auto":
            data = {**data, "warmup": AUTO_PHASE_WARMUP_S}
            data.setdefault("warmup_auto_max", AUTO_MAX_S)
        return data

    @field_validator("records", mode="before")
    @classmethod
    def _records(cls, v: Any) -> str:
        v = str(v).strip()
        try:
            keep_fraction(v)
        except ValueError as e:
            raise ValueError(
                f"{e}. all keeps every request in requests.parquet; "
                "sample:0.01 keeps 1% of them, none keeps none (summaries, "
                "timeline and models then come from HdrHistograms)"
            ) from None
        return v

    @field_validator("driver", mode="before")
    @classmethod
    def _known_driver(cls, v: Any) -> str | DriverCommand:
        """One message per mistake (a union would report a failure for each of its arms)."""
        if isinstance(v, dict):
            try:
                return DriverCommand.model_validate(v)
            except ValidationError as e:
                raise ValueError(e.errors()[0]["msg"].removeprefix("Value error, ")) from None
        if not isinstance(v, str) or v not in DRIVERS:
            raise ValueError(
                f"unknown driver {v!r}; bundled drivers are {', '.join(DRIVERS)}, "
                'or give a program: driver: {cmd: "prog {spec} {out}"}'
            )
        return v

    def model_dump(self, **kwargs) -> dict[str, Any]:
        """The fields, less `driver`, `records` and `tls_resume` at their defaults (`http`,
        `all`, true): cell ids hash this, and cells written before those existed keep their
        ids (and run.json its shape)."""
        out = super().model_dump(**kwargs)
        if out.get("driver") == "http":
            del out["driver"]
        if out.get("records") == "all":
            del out["records"]
        if out.get("tls_resume") is True:
            del out["tls_resume"]
        if not out.get("warmup_auto_max_s"):
            out.pop("warmup_auto_max_s", None)
        return out

    @property
    def driver_label(self) -> str:
        """`http`, a bundled driver's name, or `cmd` (trials.csv `load_driver`)."""
        return self.driver if isinstance(self.driver, str) else self.driver.label

    @model_validator(mode="after")
    def _rate(self, info: ValidationInfo) -> Load:
        if isinstance(self.driver, str) and self.mode not in DRIVERS[self.driver]:
            raise ValueError(
                f"driver {self.driver!r} has no {self.mode} mode; it implements "
                f"{', '.join(DRIVERS[self.driver])}"
            )
        if self.driver != "http" and self.records != "all":
            raise ValueError(
                f"records: {self.records} needs the HTTP generator (driver: http); "
                "other drivers write every request (loadgen/DRIVER.md)"
            )
        searching = bool(info.context and info.context.get("search"))
        if self.mode == "open" and self.rate_rps is None and not searching:
            raise ValueError("open mode needs `rate` (arrivals per second), e.g. rate: 1000")
        if self.mode == "ramp" and self.ramp is None:
            raise ValueError(
                "ramp mode needs `ramp: {rates: [...], step: 5s, "
                "slo: {p99_ms: 10, error_rate: 0.001}}`"
            )
        return self

    @property
    def window_s(self) -> float:
        """The measured time of one trial (burst: all releases; ramp: all steps at most)."""
        return measured_window_s(
            self.mode,
            self.duration_s,
            self.bursts,
            self.burst_interval_s,
            len(self.ramp.rates) if self.ramp else 0,
            self.ramp.step_s if self.ramp else 0.0,
        )


def trial_seed(cell_id: str, trial: int, load_seed: int = 1) -> int:
    """The seed of one trial's arrival schedule, think times and network draws: a hash of the
    cell id, the trial number and `load.seed`. Every cell and every trial gets its own
    schedule; running the same cell again replays the same schedules. 48 bits (exact in a
    float64 column)."""
    digest = hashlib.sha256(f"{cell_id}/{trial}/{load_seed}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


# the LoadSpec fields that are the `load:` fields of the same name, as they are
_SPEC_FROM_LOAD = (
    "mode",
    "connections",
    "think_time_s",
    "arrivals",
    "max_outstanding",
    "duration_s",
    "warmup_s",
    "warmup_auto_max_s",
    "timeout_s",
    "keepalive",
    "tls_resume",
    "processes",
    "bursts",
    "burst_interval_s",
    "records",
)


@dataclasses.dataclass(frozen=True)
class TlsTarget:
    """An HTTPS endpoint, as the load generator checks it: the CA file its certificate must
    chain to (empty: the system's CAs), whether to verify at all, and the name to check and
    send as SNI (empty: the host)."""

    ca_file: str = ""
    verify: bool = True
    server_name: str = ""


def to_load_spec(
    load: Load,
    workload: Workload,
    host: str,
    port: int,
    seed: int,
    cpus: tuple[int, ...] = (),
    source: str | None = None,
    tls: TlsTarget | None = None,
) -> LoadSpec:
    """The load generator's spec for one load run against host:port. `seed` seeds the arrival
    schedule, think times and generated fields; `cpus` pins the load-generator processes;
    `source` (the experiment file) is where a mix's CSV paths are relative to; `tls`: HTTPS
    (None: plain HTTP)."""
    ramp = load.ramp or Ramp(rates=[1.0])
    return LoadSpec(
        tls=tls is not None,
        tls_ca_file=tls.ca_file if tls else "",
        tls_verify=tls.verify if tls else True,
        tls_server_name=tls.server_name if tls else "",
        host=host,
        port=port,
        target=workload.target,
        method=workload.method,
        body=workload.body,
        headers=tuple(workload.headers.items()),
        requests=resolved_mix(workload, source),
        replay_file=replay_path(workload, source) if workload.replay else "",
        replay_order=workload.replay_order,
        replay_names=replay_names(workload, source) if workload.replay else (),
        think_dist=load.think,
        rate_rps=load.rate_rps or 0.0,
        seed=seed,
        cpus=tuple(cpus),
        ramp_rates=tuple(load.ramp.rates) if load.ramp else (),
        ramp_step_s=ramp.step_s,
        slo_p99_ms=ramp.slo.p99_ms,
        slo_error_rate=ramp.slo.error_rate,
        **{name: getattr(load, name) for name in _SPEC_FROM_LOAD},
    )


def shard_seed(seed: int, index: int, count: int) -> int:
    """The seed of shard `index` of `count` of one trial: the trial's own seed when the load
    is not split, else a hash of it and the index, so the shards' streams are independent
    (and each replays when the trial runs again). 48 bits, like trial_seed."""
    if count == 1:
        return seed
    digest = hashlib.sha256(f"{seed}/shard/{index}/{count}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def shard_specs(spec: LoadSpec, count: int) -> list[LoadSpec]:
    """One trial's load split over `count` load-generator hosts: each gets rate/count (open)
    and its share of the connections (they add up to `connections`; a host gets at least
    one) and of max_outstanding, with an independent seed. Independent Poisson streams of
    rate r/count sum to one Poisson stream of rate r."""
    out = []
    for i in range(count):
        conns = spec.connections // count + (1 if i < spec.connections % count else 0)
        out.append(
            dataclasses.replace(
                spec,
                connections=max(1, conns),
                rate_rps=spec.rate_rps / count,
                max_outstanding=-(-spec.max_outstanding // count) if spec.max_outstanding else 0,
                seed=shard_seed(spec.seed, i, count),
            )
        )
    return out
