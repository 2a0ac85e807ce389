"""The `workload:` and `load:` blocks, and the one conversion into the load generator's LoadSpec.

`perfctl run` (one per trial) and `perfctl load URL` both describe load with these models and
turn them into a `loadgen.spec.LoadSpec` through `to_load_spec`; nothing else builds a LoadSpec.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Literal
from urllib.parse import urlencode

from pydantic import Field, field_validator, model_validator

from loadgen.spec import LoadSpec, measured_window_s

from . import units
from .base import FrozenModel, Seconds


class Workload(FrozenModel):
    path: str = "/work"
    params: dict[str, str | int | float] = Field(default_factory=dict)
    method: Literal["GET", "POST"] = "GET"
    body: str = ""

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"path must start with '/', got {v!r}")
        return v

    @property
    def target(self) -> str:
        """The HTTP request target: path plus the params as a query string."""
        query = urlencode(dict(self.params))
        return self.path + (f"?{query}" if query else "")

    @property
    def spin_us(self) -> float:
        return float(self.params.get("spin_us", 0) or 0)

    @property
    def sleep_us(self) -> float:
        return float(self.params.get("sleep_us", 0) or 0)


class Slo(FrozenModel):
    p99_ms: float = Field(10.0, gt=0, description="a ramp step meets the SLO when p99 < this")
    error_rate: float = Field(0.001, ge=0, le=1)

    @field_validator("p99_ms", mode="before")
    @classmethod
    def _ms(cls, v: Any) -> float:
        return units.duration_ms(v) if isinstance(v, str) else v


class Ramp(FrozenModel):
    """Ramp mode: open-loop steps at these rates until the SLO breaks."""

    rates: list[float] = Field(min_length=1)
    step_s: Seconds = Field(5.0, alias="step", gt=0)
    slo: Slo = Slo()

    @field_validator("rates")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if min(v) <= 0:
            raise ValueError("every ramp rate must be > 0")
        return sorted(v)


class Load(FrozenModel):
    mode: Literal["closed", "open", "burst", "ramp"] = "closed"
    connections: int = Field(1, ge=1, le=100_000)
    think_time_s: Seconds = Field(0.0, alias="think_time")
    think: Literal["fixed", "exp"] = "fixed"
    rate_rps: float | None = Field(None, alias="rate", gt=0)
    arrivals: Literal["poisson", "constant", "uniform"] = "poisson"
    max_outstanding: int = Field(0, ge=0)
    duration_s: Seconds = Field(10.0, alias="duration", gt=0, le=24 * 3600)
    warmup_s: Seconds = Field(2.0, alias="warmup", le=3600)
    timeout_s: Seconds = Field(5.0, alias="timeout", gt=0)
    keepalive: bool = True
    seed: int = 1                    # mixed into every trial's seed (trial_seed)
    processes: int = Field(1, ge=1, le=64, description="load-generator worker processes")
    bursts: int = Field(1, ge=1, le=10_000, description="burst: releases of `connections`")
    burst_interval_s: Seconds = Field(1.0, alias="burst_interval", gt=0)
    ramp: Ramp | None = None

    @model_validator(mode="after")
    def _rate(self) -> "Load":
        if self.mode == "open" and self.rate_rps is None:
            raise ValueError("open mode needs `rate` (arrivals per second), e.g. rate: 1000")
        if self.mode == "ramp" and self.ramp is None:
            raise ValueError("ramp mode needs `ramp: {rates: [...], step: 5s, "
                             "slo: {p99_ms: 10, error_rate: 0.001}}`")
        return self

    @property
    def window_s(self) -> float:
        """The measured time of one trial (burst: all releases; ramp: all steps at most)."""
        return measured_window_s(self.mode, self.duration_s, self.bursts, self.burst_interval_s,
                                 len(self.ramp.rates) if self.ramp else 0,
                                 self.ramp.step_s if self.ramp else 0.0)


def trial_seed(cell_id: str, trial: int, load_seed: int = 1) -> int:
    """The seed of one trial's arrival schedule, think times and network draws: a hash of the
    cell id, the trial number and `load.seed`. Every cell and every trial gets its own
    schedule; running the same cell again replays the same schedules. 48 bits (exact in a
    float64 column)."""
    digest = hashlib.sha256(f"{cell_id}/{trial}/{load_seed}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def to_load_spec(load: Load, workload: Workload, host: str, port: int, seed: int,
                 cpus: tuple[int, ...] = ()) -> LoadSpec:
    """The load generator's spec for one load run against host:port. `seed` seeds the arrival
    schedule and think times; `cpus` pins the load-generator processes."""
    ramp = load.ramp or Ramp(rates=[1.0])
    return LoadSpec(
        host=host, port=port, target=workload.target, method=workload.method,
        body=workload.body, mode=load.mode, connections=load.connections,
        think_time_s=load.think_time_s, think_dist=load.think, rate_rps=load.rate_rps or 0.0,
        arrivals=load.arrivals, max_outstanding=load.max_outstanding,
        duration_s=load.duration_s, warmup_s=load.warmup_s, timeout_s=load.timeout_s,
        keepalive=load.keepalive, seed=seed, cpus=tuple(cpus), processes=load.processes,
        bursts=load.bursts, burst_interval_s=load.burst_interval_s,
        ramp_rates=tuple(load.ramp.rates) if load.ramp else (), ramp_step_s=ramp.step_s,
        slo_p99_ms=ramp.slo.p99_ms, slo_error_rate=ramp.slo.error_rate)


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
        out.append(dataclasses.replace(
            spec, connections=max(1, conns), rate_rps=spec.rate_rps / count,
            max_outstanding=-(-spec.max_outstanding // count) if spec.max_outstanding else 0,
            seed=shard_seed(spec.seed, i, count)))
    return out
