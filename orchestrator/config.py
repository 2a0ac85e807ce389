"""Experiment files: YAML -> validated, frozen pydantic models -> cells.

Flow: load the YAML, apply a profile and `--set` overrides to the raw document, expand the
matrix (cross product, minus `exclude`, plus `include`), substitute `{axis}` placeholders into
a copy of the document per cell, and validate every cell's document with the models below.
All of it happens before the first server starts. Every problem raises PerfctlError naming
the file, the key path and the fix.
"""
from __future__ import annotations

import copy
import hashlib
import os
import itertools
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError,
                      field_validator, model_validator)

from . import bundled, units
from .errors import PerfctlError

RUNTIME_PLACEHOLDERS = {"port", "workdir", "host",   # filled when the server starts
                        "seq"}                         # by the load generator, per request
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NOT_SUBSTITUTED = ("matrix", "exclude", "include", "profiles")


def _duration(v: Any) -> float:
    return units.duration_s(v)


Seconds = Annotated[float, BeforeValidator(_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --- servers -------------------------------------------------------------------------------
class ReadyCheck(_Model):
    """How to tell a `cmd` server is ready: an HTTP GET path answering < 500, or a TCP accept."""

    http: str | None = Field(None, description="path to GET, e.g. /health")
    timeout_s: Seconds = Field(30.0, alias="timeout", description="give up after this long")


class BundledServer(_Model):
    """One of perfctl's own servers (servers/PROTOCOL.md)."""

    impl: Literal["c", "java", "python"]
    model: str | None = Field(None, description="concurrency model; default: the impl's first")
    threads: int = Field(4, ge=1, le=100_000)
    backlog: int = Field(128, ge=1, le=1_000_000)
    buckets: int = Field(1024, ge=1, le=1 << 24)
    layout: Literal["flat", "by-type"] = "flat"
    variant: Literal["", "asan"] = ""
    startup_timeout_s: Seconds = Field(30.0, alias="startup_timeout")

    @model_validator(mode="after")
    def _check_model(self) -> "BundledServer":
        models = bundled.MODELS[self.impl]
        if self.model is not None and self.model not in models:
            raise ValueError(f"impl {self.impl!r} has no model {self.model!r}; "
                             f"choose one of {', '.join(models)}")
        return self

    @property
    def model_name(self) -> str:
        return self.model or bundled.MODELS[self.impl][0]

    @property
    def label(self) -> str:
        return f"{self.impl}-{self.model_name}"


class CommandServer(_Model):
    """Any server: a shell command with {port} (and optionally {workdir}, {host})."""

    cmd: str
    ready: ReadyCheck = ReadyCheck()
    files: dict[str, str] = Field(default_factory=dict,
                                  description="files written into {workdir} before start")
    threads: int | None = None
    port: int | None = Field(None, ge=1, le=65535, description="fixed port; default: a free one")

    @field_validator("cmd")
    @classmethod
    def _needs_port(cls, v: str) -> str:
        if "{port}" not in v:
            raise ValueError("cmd must contain {port}, where perfctl puts the port to listen on")
        return v

    @property
    def label(self) -> str:
        return self.cmd.split()[0].rsplit("/", 1)[-1]


ServerSpec = Union[BundledServer, CommandServer]


# --- workload, load, placement -------------------------------------------------------------
class Workload(_Model):
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
    def spin_us(self) -> float:
        return float(self.params.get("spin_us", 0) or 0)

    @property
    def sleep_us(self) -> float:
        return float(self.params.get("sleep_us", 0) or 0)


class Slo(_Model):
    p99_ms: float = Field(10.0, gt=0, description="a ramp step meets the SLO when p99 < this")
    error_rate: float = Field(0.001, ge=0, le=1)

    @field_validator("p99_ms", mode="before")
    @classmethod
    def _ms(cls, v: Any) -> float:
        return units.duration_ms(v) if isinstance(v, str) else v


class Ramp(_Model):
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


class Load(_Model):
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
    seed: int = 1
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
        if self.mode == "burst":
            return self.bursts * self.burst_interval_s
        if self.mode == "ramp":
            return len(self.ramp.rates) * self.ramp.step_s
        return self.duration_s


class Placement(_Model):
    """Where processes run. server_cores: N picks the first N CPUs this process may use
    (usable as a matrix axis: `server_cores: "{cores}"`); server_cpus names them exactly."""

    server_cpus: list[int] | None = None
    server_cores: int | None = Field(None, ge=1, le=4096)
    loadgen_cpus: list[int] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> "Placement":
        if self.server_cpus is not None and self.server_cores is not None:
            raise ValueError("give server_cpus or server_cores, not both")
        allowed = sorted(os.sched_getaffinity(0))
        for name in ("server_cpus", "loadgen_cpus"):
            for cpu in getattr(self, name) or []:
                if cpu not in allowed:
                    raise ValueError(f"{name}: CPU {cpu} is not available here "
                                     f"(usable CPUs: {allowed})")
        if self.server_cores is not None and self.server_cores > len(allowed):
            raise ValueError(f"server_cores: {self.server_cores} > the {len(allowed)} CPUs "
                             "usable here")
        return self

    @property
    def server_cpu_list(self) -> list[int] | None:
        if self.server_cores is not None:
            return sorted(os.sched_getaffinity(0))[: self.server_cores]
        return self.server_cpus


# --- the experiment ------------------------------------------------------------------------
Scalar = Union[str, int, float, bool]


class Experiment(_Model):
    """The un-expanded file: what is common to all cells plus the matrix definition."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    servers: dict[str, dict[str, Any]]
    workload: dict[str, Any] = Field(default_factory=dict)
    load: dict[str, Any] = Field(default_factory=dict)
    network: dict[str, Any] = Field(default_factory=dict)
    matrix: dict[str, list[Scalar]] = Field(default_factory=dict)
    exclude: list[dict[str, Scalar]] = Field(default_factory=list)
    include: list[dict[str, Scalar]] = Field(default_factory=list)
    repeats: int = Field(1, ge=1, le=1000)
    placement: dict[str, Any] = Field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)
    thresholds: list[dict[str, Any]] = Field(default_factory=list)
    models: list[str] | bool = False

    @field_validator("servers")
    @classmethod
    def _some_servers(cls, v: dict) -> dict:
        if not v:
            raise ValueError("at least one server is needed")
        return v


class Cell(_Model):
    """One combination of axis values, fully resolved and validated."""

    cell_id: str
    values: dict[str, Scalar]          # the axis values, in matrix order
    server_name: str
    server: BundledServer | CommandServer
    workload: Workload
    load: Load
    network: dict[str, Any]            # as written in the file; NetworkSpec parses it
    placement: Placement

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items()) or self.server_name


class Plan(_Model):
    """An experiment compiled for running: its cells and how often each runs."""

    experiment: Experiment
    source: str
    profile: str | None
    overrides: list[str]
    cells: list[Cell]
    repeats: int
    document: dict[str, Any]   # the raw document after profile and overrides

    @property
    def axes(self) -> list[str]:
        return list(self.cells[0].values) if self.cells else []

    @property
    def trial_count(self) -> int:
        return len(self.cells) * self.repeats

    def estimated_seconds(self) -> float:
        total = 0.0
        for c in self.cells:
            start = 2.0 if isinstance(c.server, BundledServer) and c.server.impl == "java" else 0.8
            total += self.repeats * (c.load.warmup_s + c.load.window_s + start + 0.7)
        return total


# --- loading -------------------------------------------------------------------------------
def _fail(source: str, key: str, problem: str, fix: str) -> PerfctlError:
    where = f"{source}: key `{key}`" if key else source
    return PerfctlError(f"{where}: {problem}. Fix: {fix}")


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def apply_override(doc: dict, assignment: str, source: str) -> None:
    """Apply one `--set a.b.c=value` (value parsed as YAML) to the raw document in place."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise _fail(source, assignment, "--set needs KEY=VALUE",
                    "write it like --set load.duration=5s")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    parts = key.strip().split(".")
    node = doc
    for p in parts[:-1]:
        if not isinstance(node.get(p, {}), dict):
            raise _fail(source, key, f"`{p}` is not a mapping, so it has no sub-keys",
                        "set the whole value instead")
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def read_document(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise PerfctlError(f"{p}: no such experiment file. Fix: give the path of a YAML file, "
                           "e.g. perfctl run experiments.yaml")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PerfctlError(f"{p}: not valid YAML{at}: {getattr(e, 'problem', e)}. Fix: check "
                           "indentation and quoting there.") from None
    if not isinstance(doc, dict):
        raise PerfctlError(f"{p}: the file must be a YAML mapping (name:, servers:, load:, ...).")
    return doc


def _loc(loc: tuple) -> str:
    return ".".join(str(x) for x in loc if not str(x).startswith(("function-after", "tagged")))


def _validation_error(source: str, prefix: str, e: ValidationError, cell: str = "") -> PerfctlError:
    err = e.errors()[0]
    key = ".".join(x for x in (prefix, _loc(err["loc"])) if x)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        fix = "remove it or check its spelling (see README: experiment file reference)"
        msg = "unknown key"
    elif err["type"] == "missing":
        fix = "add it"
    else:
        fix = f"give a valid value (got {err.get('input')!r})"
    more = f" (and {len(e.errors()) - 1} more problem(s))" if len(e.errors()) > 1 else ""
    where = f" in cell {cell}" if cell else ""
    return _fail(source, key, f"{msg}{where}{more}", fix)


def _substitute(node: Any, values: dict[str, Scalar], source: str, path: str) -> Any:
    if isinstance(node, dict):
        return {k: _substitute(v, values, source, f"{path}.{k}" if path else str(k))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, values, source, f"{path}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node
    names = _PLACEHOLDER.findall(node)
    for n in names:
        if n not in values and n not in RUNTIME_PLACEHOLDERS:
            raise _fail(source, path, f"placeholder {{{n}}} names no matrix axis",
                        f"add `{n}: [...]` under matrix, or use one of: "
                        f"{', '.join(sorted(values)) or '(no axes defined)'}")
    whole = _PLACEHOLDER.fullmatch(node)
    if whole and whole.group(1) in values:
        return values[whole.group(1)]
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values
                            else m.group(0), node)


def _expand(exp: Experiment, source: str) -> list[dict[str, Scalar]]:
    axes = dict(exp.matrix)
    for name, vals in axes.items():
        if not vals:
            raise _fail(source, f"matrix.{name}", "this axis has no values",
                        "give at least one value, or remove the axis")
    if "server" not in axes:
        axes = {"server": list(exp.servers), **axes}
    for v in axes["server"]:
        if v not in exp.servers:
            raise _fail(source, "matrix.server", f"{v!r} is not defined under servers",
                        f"use one of {', '.join(exp.servers)}")
    names = list(axes)
    combos = [dict(zip(names, vals)) for vals in itertools.product(*axes.values())]
    for i, rule in enumerate(exp.exclude):
        for k in rule:
            if k not in axes:
                raise _fail(source, f"exclude[{i}].{k}", "not a matrix axis",
                            f"use one of {', '.join(names)}")
        combos = [c for c in combos if not all(c[k] == v for k, v in rule.items())]
    for i, extra in enumerate(exp.include):
        missing = [n for n in names if n not in extra]
        unknown = [k for k in extra if k not in axes]
        if unknown:
            raise _fail(source, f"include[{i}].{unknown[0]}", "not a matrix axis",
                        f"use only {', '.join(names)}")
        if missing:
            raise _fail(source, f"include[{i}]", f"gives no value for axis {', '.join(missing)}",
                        "an included cell names a value for every axis")
        if extra["server"] not in exp.servers:
            raise _fail(source, f"include[{i}].server", f"{extra['server']!r} is not a server",
                        f"use one of {', '.join(exp.servers)}")
        if extra not in combos:
            combos.append({n: extra[n] for n in names})
    if not combos:
        raise _fail(source, "matrix", "the matrix is empty after exclude",
                    "loosen the exclude rules or add axis values")
    return combos


def cell_id(doc: dict) -> str:
    """A stable id of a resolved cell document (same config -> same id across runs)."""
    blob = json.dumps(doc, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def compile_document(doc: dict, source: str, profile: str | None = None,
                     overrides: list[str] | None = None) -> Plan:
    """Profile, overrides, validation and matrix expansion of one raw document."""
    doc = copy.deepcopy(doc)
    overrides = list(overrides or [])
    if profile:
        profiles = doc.get("profiles") or {}
        if profile not in profiles:
            raise _fail(source, "profiles", f"no profile named {profile!r}",
                        f"use one of: {', '.join(profiles) or '(none defined)'}")
        doc = _deep_merge(doc, profiles[profile])
    for a in overrides:
        apply_override(doc, a, source)
    try:
        exp = Experiment.model_validate(doc)
    except ValidationError as e:
        raise _validation_error(source, "", e) from None
    cells = []
    for values in _expand(exp, source):
        body = {k: doc.get(k, {}) for k in ("workload", "load", "network", "placement")}
        server_raw = exp.servers[values["server"]]
        body = _substitute(body, values, source, "")
        server_doc = _substitute(server_raw, values, source, f"servers.{values['server']}")
        label = ", ".join(f"{k}={v}" for k, v in values.items())
        server = _validate_server(server_doc, source, f"servers.{values['server']}", label)
        try:
            workload = Workload.model_validate(body["workload"])
            load = Load.model_validate(body["load"])
            placement = Placement.model_validate(body["placement"])
        except ValidationError as e:
            prefix = next(k for k in ("workload", "load", "placement")
                          if _has_error(k, body, e))
            raise _validation_error(source, prefix, e, label) from None
        network = _validate_network(body["network"], source, label)
        resolved = {"values": values, "server": server.model_dump(), "workload": workload.model_dump(),
                    "load": load.model_dump(), "network": network, "placement": placement.model_dump()}
        cells.append(Cell(cell_id=cell_id(resolved), values=values, server_name=values["server"],
                          server=server, workload=workload, load=load, network=network,
                          placement=placement))
    return Plan(experiment=exp, source=source, profile=profile, overrides=overrides, cells=cells,
                repeats=exp.repeats, document=doc)


def _has_error(section: str, body: dict, e: ValidationError) -> bool:
    model = {"workload": Workload, "load": Load, "placement": Placement}[section]
    try:
        model.model_validate(body[section])
        return False
    except ValidationError:
        return True


def _validate_server(doc: Any, source: str, key: str, label: str) -> BundledServer | CommandServer:
    if not isinstance(doc, dict) or ("impl" in doc) == ("cmd" in doc):
        raise _fail(source, key, "a server is either a bundled one (`impl: c|java|python`) or "
                    "a command (`cmd: \"... {port} ...\"`), exactly one of the two",
                    "give `impl:` or `cmd:`")
    model = BundledServer if "impl" in doc else CommandServer
    try:
        return model.model_validate(doc)
    except ValidationError as e:
        raise _validation_error(source, key, e, label) from None


def _validate_network(doc: Any, source: str, label: str) -> dict[str, Any]:
    """The network block: validated by orchestrator.netem when it is present."""
    if not isinstance(doc, dict):
        raise _fail(source, "network", "must be a mapping", "e.g. network: {delay: 10ms}")
    from .netem import NetworkSpec  # the injection backends validate their own block
    where = f"{source}: key `network` (cell {label})"
    NetworkSpec.from_config(doc, where=where)
    return dict(doc)   # kept as written (units as strings): the runner parses it again


def load_plan(path: str | Path, profile: str | None = None,
              overrides: list[str] | None = None) -> Plan:
    """Read, validate and expand an experiment file. Raises PerfctlError on any problem."""
    return compile_document(read_document(path), str(path), profile, overrides)
