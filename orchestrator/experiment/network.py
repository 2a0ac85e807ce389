"""The `network:` block of an experiment: what latency, jitter, loss, reordering, faults and
bandwidth to inject, and how they change during a trial.

Durations are unit strings parsed by orchestrator.units ("10ms", "250us"; a bare number means
seconds) and are stored as float milliseconds (fields ending in _ms); bandwidth as float bits/s
(fields ending in _bps); probabilities in [0, 1] ("1%" or 0.01). The YAML keys carry no unit
suffix. Every key is a matrix axis like any other (`delay: "{d}"`, `profile: "{net}"`).

    network: {delay: 10ms, jitter: 2ms, distribution: normal, jitter_correlation: 25%,
              loss_burst: {p: 1%, r: 25%, loss_bad: 100%, loss_good: 0%},
              reorder: 5%, reset: 0.1%, blackhole: 0.1%, bandwidth: 10mbit,
              schedule: [{at: 10s, delay: 50ms}, {at: 20s, loss: 5%}]}
    network: {profile: lte, loss: 1%}          # a named profile (network_profiles.py) + overrides

Jitter semantics (the same in the proxy; netem's own tables differ slightly for pareto):
    uniform: each direction's delay is delay + U(-jitter, +jitter)
    normal:  delay + N(0, sigma=jitter)
    pareto:  delay + Lomax(shape 3, scale 2*jitter): one-sided, mean = jitter, heavy tail
Each direction's delay + jitter draw is clamped at >= 0. `jitter_correlation` rho correlates
consecutive draws of a direction (proxy: Gaussian copula, marginal unchanged; netem: its own
correlation, which also narrows the marginal).
Loss: `loss` is independent per chunk (proxy) / packet (netem); `loss_burst` is a
Gilbert-Elliott chain: p = P(good -> bad), r = P(bad -> good), loss_bad = 1-h, loss_good = 1-k
(tc netem `loss gemodel p r 1-h 1-k`). In the proxy a lost chunk is held back one `rto`.
`reorder` P (with `reorder_correlation`): like netem, a chosen chunk skips the delay.
`reset` / `blackhole`: per chunk, the probability that the connection is reset / silently
swallowed from then on (proxy backend only; tc netem has no such fault).
`schedule`: steps `{at: T, <keys>}`; from T after the load starts (t_s = 0 of the trial's
timeline) the keys replace those of the step before (`delay` also replaces delay_up/down,
`bandwidth` bandwidth_up/down, `loss` loss_burst and the other way round).

This module says what to inject. What the probe should then measure is netem/expected.py's,
and how tc and perfctl-proxy spell it on their command lines is netem/commands.py's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import PerfctlError
from .network_profiles import profile_keys, profile_source
from .units import bandwidth_bps, duration_ms, duration_s, fraction

if TYPE_CHECKING:
    pass

Backend = Literal["auto", "proxy", "netem", "tbf"]
Distribution = Literal["uniform", "normal", "pareto"]
# keys a schedule step may not change, and keys whose setting replaces others of the step before
_FIXED_KEYS = ("backend", "profile", "schedule")
_REPLACES = {
    "delay": ("delay_up", "delay_down"),
    "bandwidth": ("bandwidth_up", "bandwidth_down"),
    "loss": ("loss_burst",),
    "loss_burst": ("loss",),
}


class GilbertElliott(BaseModel):
    """Bursty loss: a two-state Markov chain per connection and direction, stepped once per
    chunk (proxy) or packet (netem) before the chunk's loss is drawn in the new state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p: float = Field(description="P(good -> bad) per chunk")
    r: float = Field(description="P(bad -> good) per chunk")
    loss_bad: float = Field(1.0, description="loss probability in the bad state (netem 1-h)")
    loss_good: float = Field(0.0, description="loss probability in the good state (netem 1-k)")

    @field_validator("p", "r", "loss_bad", "loss_good", mode="before")
    @classmethod
    def _prob(cls, v: Any) -> float:
        return fraction(v)

    @model_validator(mode="after")
    def _reaches_good(self) -> GilbertElliott:
        if self.p > 0 and self.r <= 0:
            raise ValueError("r must be > 0 when p > 0 (the chain would stay bad forever)")
        return self

    @property
    def bad_share(self) -> float:
        """Stationary probability of the bad state."""
        return self.p / (self.p + self.r) if self.p + self.r > 0 else 0.0

    def loss_rate(self) -> float:
        """Long-run fraction of chunks lost."""
        b = self.bad_share
        return (1 - b) * self.loss_good + b * self.loss_bad

    def mean_burst(self) -> float:
        """Mean length of a run of consecutive lost chunks (inf if every chunk is lost)."""
        b = self.bad_share
        pi = {"g": 1 - b, "b": b}
        loss = {"g": self.loss_good, "b": self.loss_bad}
        step = {
            ("g", "g"): 1 - self.p,
            ("g", "b"): self.p,
            ("b", "g"): self.r,
            ("b", "b"): 1 - self.r,
        }
        starts = sum(pi[a] * (1 - loss[a]) * step[a, c] * loss[c] for a in "gb" for c in "gb")
        return self.loss_rate() / starts if starts > 0 else math.inf


class Network(BaseModel):
    """Injected network conditions. Durations in ms, bandwidth in bits/s after validation."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    backend: Backend = Field(
        "auto",
        description="auto: netem where the kernel has sch_netem and perfctl is root, else proxy",
    )
    delay_ms: float = Field(0.0, alias="delay", description="added each way")
    delay_up_ms: float | None = Field(
        None, alias="delay_up", description="client -> server; default: delay"
    )
    delay_down_ms: float | None = Field(
        None, alias="delay_down", description="server -> client; default: delay"
    )
    jitter_ms: float = Field(0.0, alias="jitter", description="added to each direction's delay")
    distribution: Distribution = Field(
        "uniform",
        description="the jitter's law: U(-j, +j), N(0, j), or Lomax(3, 2j): one-sided, mean j",
    )
    jitter_correlation: float = Field(0.0, description="correlation of consecutive jitter draws")
    loss: float = Field(0.0, description="probability a segment is held back one rto")
    loss_burst: GilbertElliott | None = Field(
        None, description="Gilbert-Elliott loss instead of loss"
    )
    rto_ms: float = Field(
        200.0, alias="rto", description="how long a lost segment is held back (proxy)"
    )
    reorder: float = Field(0.0, description="probability a chunk skips the delay (netem reorder)")
    reorder_correlation: float = Field(0.0, description="correlation of consecutive reorder draws")
    reset: float = Field(0.0, description="probability a chunk resets its connection")
    blackhole: float = Field(0.0, description="probability a chunk black-holes its connection")
    bandwidth_bps: float | None = Field(None, alias="bandwidth", description="each direction")
    bandwidth_up_bps: float | None = Field(
        None, alias="bandwidth_up", description="client -> server; default: bandwidth"
    )
    bandwidth_down_bps: float | None = Field(
        None, alias="bandwidth_down", description="server -> client; default: bandwidth"
    )
    profile: str | None = Field(None, description="named profile (network_profiles.py)")
    schedule: list[NetworkStep] = Field(
        default_factory=list, description="changes during the trial"
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_and_schedule(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("profile") is not None:
            data = {**profile_keys(data["profile"]), **data}
        steps = data.get("schedule")
        if steps is None:
            return data
        if not isinstance(steps, list):
            raise ValueError("schedule must be a list of steps like [{at: 10s, delay: 50ms}]")
        prev = {k: v for k, v in data.items() if k not in ("profile", "schedule")}
        out = []
        for i, step in enumerate(steps):
            if not isinstance(step, dict) or "at" not in step:
                raise ValueError(
                    f"schedule[{i}] must be a mapping with `at:` and the keys that "
                    "change, e.g. {at: 10s, delay: 50ms}"
                )
            change = {k: v for k, v in step.items() if k != "at"}
            fixed = sorted(set(change) & set(_FIXED_KEYS))
            if fixed:
                raise ValueError(f"schedule[{i}] cannot change {', '.join(fixed)}")
            if not change:
                raise ValueError(f"schedule[{i}] changes nothing; add the keys to change")
            merged = dict(prev)
            for k in change:
                for gone in _REPLACES.get(k, ()):
                    merged.pop(gone, None)
            merged.update(change)
            out.append({"at": step["at"], "state": merged})
            prev = merged
        data["schedule"] = out
        return data

    @field_validator(
        "delay_ms", "delay_up_ms", "delay_down_ms", "jitter_ms", "rto_ms", mode="before"
    )
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else duration_ms(v)

    @field_validator(
        "loss",
        "jitter_correlation",
        "reorder",
        "reorder_correlation",
        "reset",
        "blackhole",
        mode="before",
    )
    @classmethod
    def _prob(cls, v: Any) -> float:
        return fraction(v)

    @field_validator("bandwidth_bps", "bandwidth_up_bps", "bandwidth_down_bps", mode="before")
    @classmethod
    def _bandwidth(cls, v: Any) -> Any:
        return None if v is None else bandwidth_bps(v)

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: Any) -> Any:
        if v is not None:
            profile_keys(v)
        return v

    @model_validator(mode="after")
    def _defaults_and_consistency(self) -> Network:
        if self.delay_up_ms is None:
            self.delay_up_ms = self.delay_ms
        if self.delay_down_ms is None:
            self.delay_down_ms = self.delay_ms
        if self.bandwidth_up_bps is None:
            self.bandwidth_up_bps = self.bandwidth_bps
        if self.bandwidth_down_bps is None:
            self.bandwidth_down_bps = self.bandwidth_bps
        if self.loss and self.loss_burst:
            raise ValueError("give loss (independent) or loss_burst (Gilbert-Elliott), not both")
        if self.has_loss and self.rto_ms <= 0:
            raise ValueError(
                "rto must be > 0 when loss is set (the proxy holds a 'lost' chunk back one rto)"
            )
        if self.jitter_correlation >= 1 or self.reorder_correlation >= 1:
            raise ValueError("correlations must be < 1 (100% would repeat the first draw forever)")
        if self.reorder and not (self.delay_up_ms or self.delay_down_ms or self.jitter_ms):
            raise ValueError("reorder needs a delay: a reordered chunk is one that skips the delay")
        if self.backend == "tbf":
            if not self.has_bandwidth:
                raise ValueError("backend tbf shapes bandwidth only: set bandwidth (e.g. 10mbit)")
            if (
                self.delay_up_ms
                or self.delay_down_ms
                or self.jitter_ms
                or self.has_loss
                or self.reorder
                or self.proxy_only
                or self.schedule
            ):
                raise ValueError(
                    "backend tbf shapes bandwidth only; for delay/jitter/loss/"
                    "reorder/faults/schedule use backend: proxy (or netem where "
                    "the kernel has sch_netem)"
                )
        if self.backend == "netem" and self.proxy_only:
            raise ValueError(
                "reset and blackhole are faults only the proxy injects (tc netem "
                "has none); use backend: proxy or auto"
            )
        last = 0.0
        for i, step in enumerate(self.schedule):
            if step.at_s <= last:
                raise ValueError(f"schedule[{i}].at must be > 0 and later than the step before")
            last = step.at_s
        return self

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, data: Any, where: str = "network") -> Network:
        """Validate a `network:` mapping; raise PerfctlError naming the key and the fix."""
        if data is None:
            data = {}
        if isinstance(data, Network):
            return data
        if not isinstance(data, dict):
            raise PerfctlError(
                f"{where} must be a mapping like {{delay: 10ms, jitter: 1ms}}, not {data!r}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            parts = []
            for err in e.errors():
                loc = ".".join(str(x) for x in err["loc"]).replace(".state", "")
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    msg = f"unknown key; allowed keys are {', '.join(f.alias or n for n, f in cls.model_fields.items())}"
                parts.append(f"{where}.{loc}: {msg}" if loc else f"{where}: {msg}")
            raise PerfctlError("; ".join(parts)) from None

    # ------------------------------------------------------------------ derived values
    @property
    def has_loss(self) -> bool:
        return bool(self.loss or (self.loss_burst and self.loss_burst.loss_rate() > 0))

    @property
    def has_bandwidth(self) -> bool:
        return bool(self.bandwidth_up_bps or self.bandwidth_down_bps)

    @property
    def proxy_only(self) -> bool:
        """Faults tc netem cannot inject (any step)."""
        return bool(self.reset or self.blackhole or any(s.state.proxy_only for s in self.schedule))

    @property
    def shapes(self) -> bool:
        """True when anything at all is injected (in any step)."""
        return bool(
            self.delay_up_ms
            or self.delay_down_ms
            or self.jitter_ms
            or self.has_loss
            or self.has_bandwidth
            or self.reset
            or self.blackhole
            or any(s.state.shapes for s in self.schedule)
            or self.schedule
        )

    @property
    def loss_per_chunk(self) -> float:
        """Long-run probability that one chunk of one direction is lost."""
        return self.loss_burst.loss_rate() if self.loss_burst else self.loss

    def direction_delays_ms(self) -> tuple[float, float]:
        return float(self.delay_up_ms or 0.0), float(self.delay_down_ms or 0.0)

    def direction_bandwidths_bps(self) -> tuple[float | None, float | None]:
        return self.bandwidth_up_bps, self.bandwidth_down_bps

    @property
    def path_bandwidth_bps(self) -> float | None:
        """Throughput of a bulk transfer out and back (the echo probe): the slower direction."""
        rates = [b for b in self.direction_bandwidths_bps() if b]
        return min(rates) if rates else None

    def final_state(self) -> Network:
        """The network in force after the last schedule step (self without a schedule)."""
        return self.schedule[-1].state if self.schedule else self

    def expected_rtt_ms(self) -> float:
        """Mean added round-trip time: delay_up + delay_down plus the mean jitter of each
        direction (after the >= 0 clamp). Loss and reordering are not included (the median the
        probe is checked against, with them: netem/expected.py expected_rtt_p50_ms)."""
        return sum(
            _mean_clamped(d, self.jitter_ms, self.distribution) for d in self.direction_delays_ms()
        )

    def describe(self) -> str:
        """Short label, e.g. 'delay=10ms jitter=2ms(normal) loss=1% bw=10mbit'."""
        up, down = self.direction_delays_ms()
        bits = [f"profile={self.profile}"] if self.profile else []
        bits.append(
            f"delay={_fmt_ms(up)}"
            if up == down
            else f"delay_up={_fmt_ms(up)} delay_down={_fmt_ms(down)}"
        )
        if self.jitter_ms:
            corr = f",corr={self.jitter_correlation * 100:g}%" if self.jitter_correlation else ""
            bits.append(f"jitter={_fmt_ms(self.jitter_ms)}({self.distribution}{corr})")
        if self.loss:
            bits.append(f"loss={self.loss * 100:g}% rto={_fmt_ms(self.rto_ms)}")
        if self.loss_burst:
            g = self.loss_burst
            bits.append(
                f"loss_burst=ge(p={g.p * 100:g}%,r={g.r * 100:g}%,bad={g.loss_bad * 100:g}%,"
                f"good={g.loss_good * 100:g}%) rto={_fmt_ms(self.rto_ms)}"
            )
        if self.reorder:
            bits.append(f"reorder={self.reorder * 100:g}%")
        if self.reset:
            bits.append(f"reset={self.reset * 100:g}%")
        if self.blackhole:
            bits.append(f"blackhole={self.blackhole * 100:g}%")
        bu, bd = self.direction_bandwidths_bps()
        if bu and bu == bd:
            bits.append(f"bw={format_rate(bu)}")
        else:
            bits += [f"bw_{k}={format_rate(b)}" for k, b in (("up", bu), ("down", bd)) if b]
        for step in self.schedule:
            bits.append(f"@{step.at_s:g}s[{step.state.describe()}]")
        return " ".join(bits)

    def source(self) -> str | None:
        """Where the profile's numbers come from (None without a profile)."""
        return profile_source(self.profile) if self.profile else None


class NetworkStep(BaseModel):
    """One schedule step: from at_s after the load starts, the network is `state`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    at_s: float = Field(alias="at", description="when the step applies, after the load starts")
    state: Network

    @field_validator("at_s", mode="before")
    @classmethod
    def _at(cls, v: Any) -> float:
        return duration_s(v)


Network.model_rebuild()


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
