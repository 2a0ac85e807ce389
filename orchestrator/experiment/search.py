"""`search:`: find, per cell, the largest load that meets an SLO (the search itself runs in
orchestrator/search/; this module only reads and checks what the file asks for).

    search:
      slo: {p99: 30ms, error_rate: 0.1%}   # one latency statistic (any percentile, or mean)
      precision: 2%                        # stop when the interval's half-width is this small
      confidence: 95%                      # of the interval
      max_trials: 8                        # per cell, the set-up probes and retries included
      include_noisy: false                 # true: noisy (but valid, steady) probes count too

Open load (`load.mode: open`) searches the arrival rate; closed load searches the number of
users (`connections`), each with the file's think time. What the search decides, the file must
not fix: a `rate` axis or `load.rate` (open), a `connections` axis or `load.connections`
(closed), `repeats`; nor can it run with `models:` or on a `cluster:`. check_search() says so, naming the key and the fix.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from . import units
from .base import FrozenModel
from .document import fail, placeholders

MIN_WINDOW_S = 5.0  # the stationarity test needs five per-second points (measure/stationarity)
SETUP_PROBES = 2  # the service-time probe and the saturation probe
MIN_KNEE_PROBES = 2  # an interval needs two probes near the knee (it has n - 1 df)
_PERCENTILE = re.compile(r"^p(\d+(?:\.\d+)?)$")


def percentile_q(stat: str) -> float:
    """`p99` -> 99.0, `p99.9` -> 99.9, `p999` -> 99.9 (the trials.csv spelling), `p50` ->
    50.0. ValueError naming the accepted forms otherwise. The same reading as
    models.stations.percentile_of (tests check they agree)."""
    m = _PERCENTILE.match(stat)
    if not m:
        raise ValueError(f"{stat!r} is not a percentile; write p50, p95, p99, p99.9 or mean")
    digits = m.group(1)
    if "." not in digits and len(digits) > 2 and digits.startswith("99"):
        digits = digits[:2] + "." + digits[2:]  # p999 -> 99.9
    q = float(digits)
    if not 0.0 < q < 100.0:
        raise ValueError(f"percentile {stat!r} is outside (0, 100); write e.g. p99 or p99.9")
    return q


class SearchSlo(FrozenModel):
    """The SLO a load level must meet: one latency statistic at most `latency_ms`, and at most
    `error_rate` of the requests failed. Written `{p99: 30ms, error_rate: 0.1%}`."""

    stat: str = Field(description="`mean` or a percentile (`p50`, `p95`, `p99`, `p99.9`)")
    latency_ms: float = Field(gt=0, description="the statistic's limit, ms")
    error_rate: float = Field(
        0.001, ge=0, le=1, description="the largest share of failed requests (`0.1%`)"
    )

    @model_validator(mode="before")
    @classmethod
    def _read(cls, v: Any) -> Any:
        if not isinstance(v, dict) or "stat" in v:
            return v
        stats = [k for k in v if k != "error_rate"]
        if len(stats) != 1:
            raise ValueError(
                "give exactly one latency statistic and its limit, e.g. "
                f"slo: {{p99: 30ms, error_rate: 0.1%}} (got {', '.join(map(str, stats)) or 'none'})"
            )
        stat = str(stats[0])
        if stat != "mean":
            percentile_q(stat)
        raw = v[stat]
        if isinstance(raw, bool) or not isinstance(raw, str):
            raise ValueError(
                f"`{stat}: {raw}` has no unit; write the limit with one, e.g. {stat}: 30ms "
                "(a bare number would mean seconds)"
            )
        try:
            limit_ms = units.duration_ms(raw)
        except ValueError as e:
            raise ValueError(f"{stat}: {e}") from None
        if limit_ms <= 0:
            raise ValueError(f"`{stat}: {raw}`: the limit must be above zero")
        out = {"stat": stat, "latency_ms": limit_ms}
        if "error_rate" in v:
            try:
                out["error_rate"] = units.fraction(v["error_rate"])
            except ValueError as e:
                raise ValueError(f"error_rate: {e}") from None
        return out

    @property
    def column(self) -> str | None:
        """The trials.csv column holding this statistic, or None (e.g. p95: read from the
        trial's latency histogram)."""
        if self.stat == "mean":
            return "latency_mean_ms"
        name = {50.0: "p50", 90.0: "p90", 99.0: "p99", 99.9: "p999"}.get(percentile_q(self.stat))
        return f"latency_{name}_ms" if name else None

    @property
    def text(self) -> str:
        return f"{self.stat} <= {self.latency_ms:g} ms, errors <= {100 * self.error_rate:g}%"


class Search(FrozenModel):
    """The `search:` block (module docstring)."""

    slo: SearchSlo = Field(
        description="one latency statistic with its limit, and the error rate: "
        "`{p99: 30ms, error_rate: 0.1%}` (search.slo below)"
    )
    precision: float = Field(
        0.02,
        gt=0,
        lt=1,
        description="stop when the capacity's interval is within this of it (half-width, `2%`)",
    )
    confidence: float = Field(
        0.95, ge=0.5, lt=1, description="the interval's confidence level (`95%`)"
    )
    max_trials: int = Field(
        8,
        le=1000,
        description="trials per cell at most, the two set-up probes and retries included",
    )
    include_noisy: bool = Field(
        False,
        description="use valid, steady probes the host disturbed too (named as such in "
        "capacity.json); for shared hosts where no trial is quiet",
    )

    @field_validator("precision", "confidence", mode="before")
    @classmethod
    def _fraction(cls, v: Any, info) -> Any:
        if isinstance(v, str):
            return units.fraction(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1:
            raise ValueError(
                f"{info.field_name} {v} reads as {100 * v:g}%; write a percentage, "
                f"e.g. {info.field_name}: {'2%' if info.field_name == 'precision' else '95%'}"
            )
        return v

    @field_validator("max_trials")
    @classmethod
    def _enough(cls, v: int) -> int:
        fewest = SETUP_PROBES + MIN_KNEE_PROBES
        if v < fewest:
            raise ValueError(
                f"max_trials {v} is too few: a search takes {SETUP_PROBES} set-up probes "
                f"(service time, saturation) and {MIN_KNEE_PROBES} at the knee before it has an "
                f"interval, so at least {fewest}"
            )
        return v

    def level_key(self, mode: str) -> str:
        """What the search varies: `rate` (open load) or `connections` (closed: users)."""
        return "rate" if mode == "open" else "connections"


SEARCH_MODES = ("open", "closed")
CURVE_POINTS = 8  # `rate: auto`
MAX_CURVE_POINTS = 50


def auto_rates(doc: dict, source: str) -> tuple[dict, int]:
    """`matrix: {rate: auto}` (or `{rate: {auto: K}}`): after each cell's search, K more
    trials at rates spread from its capacity, denser near the knee, for a latency-vs-load
    curve. Returns the document without that axis and K (0 when there is none)."""
    matrix = doc.get("matrix") or {}
    v = matrix.get("rate") if isinstance(matrix, dict) else None
    if not (v == "auto" or (isinstance(v, dict) and set(v) == {"auto"})):
        return doc, 0
    k = CURVE_POINTS if v == "auto" else v["auto"]
    if isinstance(k, bool) or not isinstance(k, int) or not 3 <= k <= MAX_CURVE_POINTS:
        raise fail(
            source,
            "matrix.rate.auto",
            f"the number of rates must be an integer from 3 to {MAX_CURVE_POINTS} (got {k!r})",
            "write rate: auto (8 rates) or rate: {auto: 12}",
        )
    if not doc.get("search"):
        raise fail(
            source,
            "matrix.rate",
            "rate: auto spreads rates from each cell's searched capacity, and this file has "
            "no search:",
            "add search: {slo: {p99: 30ms}} (the rates then follow the capacity it finds), or "
            "list the rates: rate: [100, 200, 400]",
        )
    out = dict(doc)
    out["matrix"] = {a: vals for a, vals in matrix.items() if a != "rate"}
    return out, k


def check_search(exp, doc: dict, source: str) -> None:
    """Refuse what fights the search (module docstring), before any cell is compiled."""
    search: Search = exp.search
    load = doc.get("load") or {}
    mode = load.get("mode", "closed")
    if mode not in SEARCH_MODES:
        raise fail(
            source,
            "load.mode",
            f"search: finds the largest open-loop rate or closed-loop number of users that "
            f"meets the SLO; {mode!r} load has neither",
            "use load.mode: open (rates) or closed (users), or remove search:",
        )
    key = search.level_key(mode)
    axes = dict(exp.matrix)
    if key in axes:
        raise fail(
            source,
            f"matrix.{key}",
            f"search: chooses the {'arrival rate' if key == 'rate' else 'number of users'} "
            f"itself, so a `{key}` axis would fight it",
            f"remove matrix.{key} (the search finds it per cell"
            + ("; `rate: auto` adds a latency-vs-load curve around it" if key == "rate" else "")
            + "), or remove search: to run the levels you list",
        )
    if key in load:
        named = placeholders(load[key]) & set(axes)
        raise fail(
            source,
            f"load.{key}",
            f"search: chooses load.{key} per probe"
            + (f" (here it names axis {', '.join(sorted(named))})" if named else ""),
            f"remove load.{key}; the search reports the {key} that meets the SLO",
        )
    if exp.repeats != 1:
        raise fail(
            source,
            "repeats",
            "search: decides how many trials each cell needs (search.max_trials)",
            "remove repeats (and precision, max_repeats); set search.max_trials instead",
        )
    if exp.models:
        raise fail(
            source,
            "models",
            "a search fits its own queueing model to its probes (capacity.json, its figure); "
            "the per-cell models of `models:` would mix the probes' load levels",
            "remove models: (perfctl model is for runs at fixed loads)",
        )
    if exp.cluster is not None:
        raise fail(
            source,
            "search",
            "the capacity search runs on this machine only, not on a cluster yet",
            "remove cluster: or search:",
        )
    window = load.get("duration", 10.0)
    try:
        window_s = units.duration_s(window)
    except ValueError:
        return  # the load block's own validation names it
    if window_s < MIN_WINDOW_S:
        raise fail(
            source,
            "load.duration",
            f"every probe of a search is tested for a trend in its per-second latency, which "
            f"needs at least {MIN_WINDOW_S:g} seconds of measured window (got {window})",
            f"set load.duration to {MIN_WINDOW_S:g}s or more",
        )
