"""The `network:` block of an experiment: what latency, jitter, loss and bandwidth to inject.

Durations are unit strings parsed by orchestrator.units ("10ms", "250us"; a bare number means
seconds) and are stored as float milliseconds (fields ending in _ms); bandwidth as float bits/s
(bandwidth_bps); loss as a probability in [0, 1]. The YAML keys carry no unit suffix.

    network: {delay: 10ms, jitter: 2ms, distribution: normal, loss: 1%, bandwidth: 10mbit}

Jitter semantics (the same in the proxy; netem's own tables differ slightly for pareto):
    uniform: each direction's delay is delay + U(-jitter, +jitter)
    normal:  delay + N(0, sigma=jitter)
    pareto:  delay + Lomax(shape 3, scale 2*jitter): one-sided, mean = jitter, heavy tail
Each direction's delay + jitter draw is clamped at >= 0.
"""
from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from ..errors import PerfctlError
from .units import bandwidth_bps, duration_ms, fraction

Backend = Literal["auto", "proxy", "netem", "tbf"]
Distribution = Literal["uniform", "normal", "pareto"]
PARETO_SHAPE = 3.0


class Network(BaseModel):
    """Injected network conditions. Durations in ms, bandwidth in bits/s after validation."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    backend: Backend = "auto"
    delay_ms: float = Field(0.0, alias="delay", description="added each way")
    delay_up_ms: float | None = Field(None, alias="delay_up", description="client -> server")
    delay_down_ms: float | None = Field(None, alias="delay_down", description="server -> client")
    jitter_ms: float = Field(0.0, alias="jitter")
    distribution: Distribution = "uniform"
    loss: float = Field(0.0, description="probability a segment is held back one rto")
    rto_ms: float = Field(200.0, alias="rto")
    bandwidth_bps: float | None = Field(None, alias="bandwidth", description="each direction")

    @field_validator("delay_ms", "delay_up_ms", "delay_down_ms", "jitter_ms", "rto_ms",
                     mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else duration_ms(v)

    @field_validator("loss", mode="before")
    @classmethod
    def _loss(cls, v: Any) -> float:
        return fraction(v)

    @field_validator("bandwidth_bps", mode="before")
    @classmethod
    def _bandwidth(cls, v: Any) -> Any:
        return None if v is None else bandwidth_bps(v)

    @model_validator(mode="after")
    def _defaults_and_consistency(self) -> "Network":
        if self.delay_up_ms is None:
            self.delay_up_ms = self.delay_ms
        if self.delay_down_ms is None:
            self.delay_down_ms = self.delay_ms
        if self.loss > 0 and self.rto_ms <= 0:
            raise ValueError("rto must be > 0 when loss is set (the proxy holds a 'lost' chunk back one rto)")
        if self.backend == "tbf":
            if not self.bandwidth_bps:
                raise ValueError("backend tbf shapes bandwidth only: set bandwidth (e.g. 10mbit)")
            if self.delay_up_ms or self.delay_down_ms or self.jitter_ms or self.loss:
                raise ValueError("backend tbf shapes bandwidth only; for delay/jitter/loss use "
                                 "backend: proxy (or netem where the kernel has sch_netem)")
        return self

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, data: Any, where: str = "network") -> "Network":
        """Validate a `network:` mapping; raise PerfctlError naming the key and the fix."""
        if data is None:
            data = {}
        if isinstance(data, Network):
            return data
        if not isinstance(data, dict):
            raise PerfctlError(f"{where} must be a mapping like {{delay: 10ms, jitter: 1ms}}, "
                               f"not {data!r}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            parts = []
            for err in e.errors():
                loc = ".".join(str(x) for x in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    msg = (f"unknown key; allowed keys are {', '.join(f.alias or n for n, f in cls.model_fields.items())}")
                parts.append(f"{where}.{loc}: {msg}" if loc else f"{where}: {msg}")
            raise PerfctlError("; ".join(parts)) from None

    # ------------------------------------------------------------------ derived values
    @property
    def shapes(self) -> bool:
        """True when anything at all is injected."""
        return bool(self.delay_up_ms or self.delay_down_ms or self.jitter_ms or self.loss or self.bandwidth_bps)

    def direction_delays_ms(self) -> tuple[float, float]:
        return float(self.delay_up_ms or 0.0), float(self.delay_down_ms or 0.0)

    def expected_rtt_ms(self) -> float:
        """Mean added round-trip time: delay_up + delay_down plus the mean jitter of each
        direction (after the >= 0 clamp). Loss is not included (see expected_rtt_p50_ms)."""
        return sum(_mean_clamped(d, self.jitter_ms, self.distribution) for d in self.direction_delays_ms())

    def expected_rtt_p50_ms(self) -> float:
        """Median added RTT of one request/response round trip: what probe p50 is checked
        against. Exact without jitter and loss; otherwise from a fixed-seed simulation."""
        up, down = self.direction_delays_ms()
        if not self.jitter_ms and not self.loss:
            return up + down
        rng = np.random.default_rng(12345)
        n = 200_000
        total = np.zeros(n)
        for d in (up, down):
            total += np.maximum(0.0, d + jitter_samples_ms(rng, n, self.jitter_ms, self.distribution))
            if self.loss:
                total += self.rto_ms * (rng.random(n) < self.loss)
        return float(np.median(total))

    def describe(self) -> str:
        """Short label, e.g. 'delay=10ms jitter=2ms(normal) loss=1% bw=10mbit'."""
        up, down = self.direction_delays_ms()
        bits = [f"delay={_fmt_ms(up)}" if up == down else f"delay_up={_fmt_ms(up)} delay_down={_fmt_ms(down)}"]
        if self.jitter_ms:
            bits.append(f"jitter={_fmt_ms(self.jitter_ms)}({self.distribution})")
        if self.loss:
            bits.append(f"loss={self.loss * 100:g}% rto={_fmt_ms(self.rto_ms)}")
        if self.bandwidth_bps:
            bits.append(f"bw={format_rate(self.bandwidth_bps)}")
        return " ".join(bits)


def jitter_samples_ms(rng: np.random.Generator, n: int, jitter: float, distribution: str) -> np.ndarray:
    """Draws of one direction's jitter term (before the clamp), same law as the proxy."""
    if not jitter:
        return np.zeros(n)
    if distribution == "normal":
        return rng.normal(0.0, jitter, n)
    if distribution == "pareto":
        a = PARETO_SHAPE
        return np.minimum((a - 1.0) * jitter * (rng.random(n) ** (-1.0 / a) - 1.0), 1000.0 * jitter)
    return rng.uniform(-jitter, jitter, n)


def _mean_clamped(d: float, j: float, dist: str) -> float:
    """E[max(0, d + J)] for one direction."""
    if not j:
        return d
    if dist == "pareto":
        return d + j
    if dist == "normal":
        z = d / j
        phi = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(z / math.sqrt(2)))
        return d * cdf + j * phi
    if d >= j:
        return d
    return (d + j) ** 2 / (4 * j)


def _fmt_ms(ms: float) -> str:
    if ms and ms < 1:
        return f"{ms * 1000:g}us"
    return f"{ms:g}ms"


def format_rate(bps: float) -> str:
    for unit, mul in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= mul and (bps / mul) == round(bps / mul, 6):
            return f"{bps / mul:g}{unit}"
    return f"{bps:g}bit"


def ms_arg(ms: float) -> str:
    """A duration as the proxy and tc accept it, exact to the microsecond: '10ms', '250us'."""
    us = round(ms * 1000.0)
    if us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


def rate_arg(bps: float) -> str:
    """A bandwidth as the proxy and tc accept it (integer bits/s): '10000000bit'."""
    return f"{int(round(bps))}bit"
