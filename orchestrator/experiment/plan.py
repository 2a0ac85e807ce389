"""Experiment files: YAML -> validated, frozen pydantic models -> a Plan of cells.

Flow: read the YAML (document.py), apply a profile and `--set` overrides to the raw document,
count the matrix (matrix.py; over MAX_CELLS is refused), then expand it lazily (cells.py):
substitute `{axis}` placeholders into each cell's sections and validate them with the typed
models (servers.py, load.py, placement.py, network.py). Every cell is validated before the
first server starts. Every problem
raises PerfctlError naming the file, the key path and the fix. After this, no raw dict travels.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import PerfctlError
from .base import FrozenModel
from .cells import Cell, Cells  # noqa: F401 - Cell is part of this module's API
from .cluster import Cluster
from .document import Scalar, apply_override, deep_merge, fail, read_document, validation_error
from .history import History
from .search import MIN_KNEE_PROBES, SETUP_PROBES, Search, auto_rates, check_search
from .servers import BundledServer
from .services import ServiceConfig, check_refs, compile_services
from .units import fraction
from .validity import Validity

MIN_AUTO_TRIALS = 6
JAVA_START_S = {"servlet": 3.0, "spring": 6.0}  # start-up of the Java servers on real stacks
SERVICE_START_S = 4.0  # the fewest trials whose median has a 95% order-statistic interval


RETRY_NOISY_ENV = "PERFCTL_RETRY_NOISY"


def default_retry_noisy() -> int:
    """retry_noisy where the file does not set it: $PERFCTL_RETRY_NOISY, else 2. A machine
    whose trials are never quiet by design (tests running side by side) sets 0 there: its
    retries would only repeat the noise."""
    raw = os.environ.get(RETRY_NOISY_ENV, "").strip()
    if not raw:
        return 2
    if not raw.isdigit() or int(raw) > 10:
        raise PerfctlError(
            f"{RETRY_NOISY_ENV}={raw!r} in the environment: expected how many times a trial "
            "the host spoiled is taken again, a whole number from 0 to 10. Fix: set it so "
            f"(0: never), or unset it for the default of 2."
        )
    return int(raw)


AUTO_WARMUP_MIN_S = 2.0  # warmup: auto's shortest: four slices of 0.5 s


class Experiment(FrozenModel):
    """The un-expanded file: what is common to all cells plus the matrix definition."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="letters, digits, . _ - (not only dots); runs go to results/<name>/",
    )
    description: str = Field("", description="free text, kept in run.json with the document")
    servers: dict[str, dict[str, Any]] = Field(
        description="name -> a bundled server or any command (servers.NAME below); "
        "without a `server` axis in `matrix`, every server is one"
    )
    services: dict[str, Any] = Field(
        default_factory=dict,
        description="name -> a real component the servers depend on, started and "
        "removed by perfctl (services.NAME below)",
    )
    workload: dict[str, Any] = Field(
        default_factory=dict, description="what each request asks for (workload below)"
    )
    load: dict[str, Any] = Field(
        default_factory=dict, description="how the load is driven (load below)"
    )
    network: dict[str, Any] = Field(
        default_factory=dict, description="injected network conditions (network below)"
    )
    matrix: dict[str, list[Scalar]] = Field(
        default_factory=dict,
        description="axis -> values; the cells are every combination, and `{axis}` "
        "anywhere in the file takes the cell's value",
    )
    exclude: list[dict[str, Scalar]] = Field(
        default_factory=list,
        description="drop the cells matching any of these {axis: value} mappings",
    )
    include: list[dict[str, Scalar]] = Field(
        default_factory=list,
        description="add these cells ({axis: value}, every axis named)",
    )
    repeats: int | Literal["auto"] = Field(
        1,
        description="trials per cell, or auto: until "
        "`precision` is reached (at most `max_repeats`)",
    )
    precision: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="target relative half-width "
        "of the 95% CI of the median of a cell's usable trials; auto without it: 5%",
    )
    precision_metric: Literal["throughput_rps", "latency_p50_ms", "latency_p99_ms"] | None = Field(
        None,
        description="the metric `precision` is judged on; default: throughput_rps "
        "for closed load, latency_p50_ms otherwise",
    )
    max_repeats: int = Field(
        20, ge=1, le=1000, description="repeats: auto runs at most this many trials per cell"
    )
    retry_noisy: int = Field(
        default_factory=lambda: default_retry_noisy(),
        ge=0,
        le=10,
        description="a trial the host spoiled (not quiet, or invalid only for the load "
        "generator's own stalls) is taken again up to this many times; every attempt is "
        "kept (retried.csv). 0: never. Default 2, or $PERFCTL_RETRY_NOISY",
    )
    order: Literal["interleaved", "random", "sequential"] = Field(
        "interleaved",
        description="interleaved: round 1 of every cell, then round 2, ...; random: "
        "each round shuffled (seeded by the name); sequential: each cell's repeats back "
        "to back",
    )
    validity: Validity = Field(
        Validity(), description="when a trial is invalid because the server failed it"
    )
    placement: dict[str, Any] = Field(
        default_factory=dict,
        description="CPUs (and, with `cluster:`, hosts) of the server, the load "
        "generator and the proxy (placement below)",
    )
    profiles: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="name -> a partial document merged over this one by "
        "`--profile NAME`, e.g. {quick: {load: {duration: 3s}, repeats: 1}}",
    )
    thresholds: list[dict[str, Any]] = Field(
        default_factory=list,
        description="entries {where: {axis: value}, METRIC: {lt|le|gt|ge: limit}} that "
        "`perfctl check` gates on",
    )
    models: list[str] | bool = Field(
        False,
        description="true: fit the queueing models after the last trial (models.json and "
        "the model figures); a non-empty list counts as true",
    )
    profile: bool = Field(
        False,
        description="record a profile of the server in every trial "
        "(py-spy, JFR or perf: measure/profiler.py) and draw its flame graph",
    )
    cluster: Cluster | None = Field(
        None,
        description="run on the hosts of a Dask distributed cluster (cluster below); "
        "without it nothing of Dask is imported",
    )
    search: Search | None = Field(
        None,
        description="find each cell's largest load that meets an SLO, with a confidence "
        "interval (the capacity search below)",
    )
    history: History | None = Field(
        History(),
        description="where each finished run is added to the performance history (history "
        "below); `false`: not added",
    )

    @field_validator("name")
    @classmethod
    def _name_is_one_directory(cls, v: str) -> str:
        if not v.strip("."):
            raise ValueError(
                f"{v!r} names no directory of its own (runs go to "
                "results/<name>/); use letters, digits, . _ - and not only dots"
            )
        return v

    @field_validator("servers")
    @classmethod
    def _some_servers(cls, v: dict) -> dict:
        if not v:
            raise ValueError("at least one server is needed")
        return v

    @field_validator("repeats", mode="before")
    @classmethod
    def _repeats(cls, v):
        if v == "auto":
            return v
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, str))
            or not str(v).isdigit()
            or not 1 <= int(v) <= 1000
        ):
            raise ValueError(f"repeats must be a valid integer from 1 to 1000, or auto (got {v!r})")
        return int(v)

    @field_validator("precision", mode="before")
    @classmethod
    def _precision(cls, v):
        if isinstance(v, str):
            return fraction(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1:
            raise ValueError(
                f"precision {v} reads as {100 * v:g}%; write a percentage, e.g. precision: 5%"
            )
        return v

    @model_validator(mode="after")
    def _auto(self) -> Experiment:
        if self.repeats == "auto" and self.max_repeats < MIN_AUTO_TRIALS:
            raise ValueError(
                f"repeats: auto needs max_repeats >= {MIN_AUTO_TRIALS} (the "
                f"median's 95% interval needs {MIN_AUTO_TRIALS} trials)"
            )
        return self

    @field_validator("history", mode="before")
    @classmethod
    def _history_switch(cls, v):
        if v is False or v is None:
            return None
        return {} if v is True else v

    @property
    def auto(self) -> bool:
        return self.repeats == "auto"

    @property
    def target_precision(self) -> float | None:
        """The relative precision asked for (auto without `precision`: 5%)."""
        return self.precision if self.precision is not None or not self.auto else 0.05


class Plan(FrozenModel):
    """An experiment compiled for running: its cells (a lazy sequence, cells.py) and how
    often each runs."""

    model_config = ConfigDict(**FrozenModel.model_config, arbitrary_types_allowed=True)

    experiment: Experiment
    source: str
    profile: str | None
    overrides: list[str]
    cells: Cells
    repeats: int  # trials per cell; with repeats: auto, the most (max_repeats)
    document: dict[str, Any]  # the raw document after profile and overrides
    services: dict[str, ServiceConfig] = {}  # name -> the typed `services:` entry
    curve_points: int = 0  # `rate: auto` under search: (search.py auto_rates)

    @property
    def order(self) -> str:
        return self.experiment.order

    @property
    def axes(self) -> list[str]:
        return list(self.cells[0].values) if self.cells else []

    @property
    def trial_count(self) -> int:
        return len(self.cells) * self.repeats

    def estimated_seconds(self, trials_per_cell: int | None = None) -> float:
        """The wall time of `trials_per_cell` trials of every cell (default: `repeats`)."""
        per_cell = self.repeats if trials_per_cell is None else trials_per_cell
        total = 0.0
        for c in self.cells:
            start = 0.8
            if isinstance(c.server, BundledServer) and c.server.impl == "java":
                start = JAVA_START_S.get(c.server.concurrency_model, 2.0)
            # warmup: auto takes at least its four half-second slices (loadgen/prewarm.py)
            auto = min(AUTO_WARMUP_MIN_S, c.load.warmup_auto_max_s)
            total += per_cell * (c.load.warmup_s + auto + c.load.window_s + start + 0.7)
        trials = len(self.cells) * per_cell
        for svc in self.services.values():  # initdb, start, seed: a few seconds each time
            total += SERVICE_START_S * (trials if svc.scope == "trial" else 1)
        return total

    def search_trials(self) -> tuple[int, int]:
        """With `search:`, the fewest and the most trials a cell's search can take: the two
        set-up probes and two probes at the knee (the fewest an interval needs), and
        search.max_trials; each plus the `rate: auto` curve's points."""
        s = self.experiment.search
        if s is None:
            return (self.repeats,) * 2
        return SETUP_PROBES + MIN_KNEE_PROBES + self.curve_points, s.max_trials + self.curve_points


def compile_document(
    doc: dict, source: str, profile: str | None = None, overrides: list[str] | None = None
) -> Plan:
    """Profile, overrides, validation and matrix expansion of one raw document."""
    doc = copy.deepcopy(doc)
    overrides = list(overrides or [])
    if profile:
        profiles = doc.get("profiles") or {}
        if profile not in profiles:
            raise fail(
                source,
                "profiles",
                f"no profile named {profile!r}",
                f"use one of: {', '.join(profiles) or '(none defined)'}",
            )
        doc = deep_merge(doc, profiles[profile])
    for a in overrides:
        apply_override(doc, a, source)
    compiled, curve_points = auto_rates(doc, source)
    try:
        exp = Experiment.model_validate(compiled)
    except ValidationError as e:
        raise validation_error(source, "", e) from None
    if exp.search is not None:
        check_search(exp, compiled, source)
    services = compile_services(exp.services, source)
    check_refs(exp.servers, services, source)
    cells = Cells(exp, compiled, source)  # refuses a matrix over MAX_CELLS without expanding it
    cells.validate()  # every cell, before anything runs
    check_cluster(exp, compiled, cells, source)
    return Plan(
        experiment=exp,
        source=source,
        profile=profile,
        overrides=overrides,
        cells=cells,
        curve_points=curve_points,
        repeats=exp.search.max_trials + curve_points
        if exp.search
        else exp.max_repeats
        if exp.auto
        else exp.repeats,
        document=doc,
        services=services,
    )


CLUSTER_MODES = ("closed", "open")


def check_cluster(exp: Experiment, doc: dict, cells: Cells, source: str) -> None:
    """Hosts in `placement:` need `cluster:`; with a local cluster they must be among h1..hN;
    cluster shards split closed and open load only; the network is injected by the proxy
    (check_cluster_network)."""
    place = doc.get("placement") or {}
    if exp.cluster is None:
        for key, sub in (("server", "host"), ("loadgen", "hosts")):
            if isinstance(place.get(key), dict) and place[key].get(sub) is not None:
                raise fail(
                    source,
                    f"placement.{key}.{sub}",
                    "names a host, but the experiment has no `cluster:` section",
                    "add `cluster: {local: {hosts: 3}}` or "
                    "`cluster: {scheduler: tcp://HOST:8786}`, or use server_cpus/"
                    "loadgen_cpus on this machine",
                )
        return
    if exp.services:
        raise fail(
            source,
            "services",
            "services (PostgreSQL) are not available on a cluster yet",
            "remove `services:` or `cluster:`",
        )
    for name, server in exp.servers.items():
        if isinstance(server, dict) and server.get("tls"):
            raise fail(
                source,
                f"servers.{name}.tls",
                "HTTPS servers are not available on a cluster yet (the certificate is made "
                "on this machine)",
                "remove `tls: true` or `cluster:`",
            )
    known = exp.cluster.known_hosts
    for cell in cells:
        if cell.load.mode not in CLUSTER_MODES:
            raise fail(
                source,
                "load.mode",
                f"{cell.load.mode!r} load cannot be split over "
                "cluster hosts (cell " + cell.label + ")",
                "use closed or open load with `cluster:`, or remove `cluster:`",
            )
        check_cluster_network(cell, source)
        if known is None:
            continue
        p = cell.placement
        for key, hosts in (
            ("placement.server.host", [p.server_host(known)]),
            ("placement.loadgen.hosts", p.loadgen_hosts(known)),
        ):
            for h in hosts:
                if h not in known:
                    raise fail(
                        source,
                        key,
                        f"host {h!r} is not a host of the local cluster "
                        f"(cell {cell.label}); known hosts: {', '.join(known)}",
                        "name one of those, or raise cluster.local.hosts",
                    )


def check_cluster_network(cell: Cell, source: str) -> None:
    """On a cluster the injector is perfctl-proxy, started on the server's host next to the
    server: refuse what only the namespace backends or the single-host runner do."""
    net = cell.network
    if not net.shapes:
        return
    if net.backend in ("netem", "tbf"):
        raise fail(
            source,
            "network.backend",
            f"backend {net.backend} is not available on a "
            f"cluster (cell {cell.label}): there the injector is perfctl-proxy on the "
            "server's host",
            "use `backend: proxy` or `auto` with `cluster:`",
        )
    if net.schedule:
        raise fail(
            source,
            "network.schedule",
            "a network schedule is not available on a "
            f"cluster yet (cell {cell.label}): its steps would run on the server's "
            "host clock, apart from the shards' start instant",
            "remove `schedule:` from the network block, or remove `cluster:`",
        )


def load_plan(
    path: str | Path, profile: str | None = None, overrides: list[str] | None = None
) -> Plan:
    """Read, validate and expand an experiment file. Raises PerfctlError on any problem."""
    return compile_document(read_document(path), str(path), profile, overrides)
