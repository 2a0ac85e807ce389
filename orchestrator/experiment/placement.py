"""`placement:`: which CPUs the server and the load generator run on, and, with `cluster:`,
on which hosts.

    placement: {server_cpus: [0], loadgen_cpus: [1]}                         # one host
    placement: {server: {host: h1, cpus: [0]}, loadgen: {hosts: [h2, h3], cpus: [1]}}

`server.host` and `loadgen.hosts` name hosts of the cluster (Dask worker names); either may
be a matrix axis (`host: "{srv}"`, `hosts: "{lg}"` with values like "h2" and "h2,h3"). CPUs under `server:`/`loadgen:` are CPUs of that host,
checked against it when the cluster is reached, not against this machine.
"""

from __future__ import annotations

import os

from pydantic import Field, field_validator, model_serializer, model_validator

from .base import FrozenModel


class ServerPlace(FrozenModel):
    """`placement.server`: the server's host and CPUs on a cluster."""

    host: str | None = Field(None, description="the host (Dask worker name); default: the first")
    cpus: list[int] | None = Field(None, description="CPUs of that host")


class LoadgenPlace(FrozenModel):
    """`placement.loadgen`: the load generator's hosts (one shard each) and CPUs."""

    hosts: list[str] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description='one shard per host (a list, or "h2,h3"); default: every host but the '
        "server's",
    )
    cpus: list[int] | None = Field(None, description="CPUs of each of those hosts")

    @field_validator("hosts", mode="before")
    @classmethod
    def _comma_list(cls, v):
        # "h2,h3" (a matrix axis value is one scalar) reads as [h2, h3]
        return [h.strip() for h in v.split(",") if h.strip()] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _distinct(self) -> LoadgenPlace:
        if self.hosts and len(set(self.hosts)) != len(self.hosts):
            raise ValueError(f"hosts: {self.hosts} names a host twice (one shard per host)")
        return self


class Placement(FrozenModel):
    """Where processes run. server_cores: N picks the first N CPUs this process may use
    (usable as a matrix axis: `server_cores: "{cores}"`); server_cpus names them exactly.
    injector_cpus: the network proxy runs one worker thread pinned on each of these CPUs."""

    server_cpus: list[int] | None = Field(None, description="pin the server to these CPUs")
    server_cores: int | None = Field(
        None, ge=1, le=4096, description="pin the server to the first N CPUs usable here"
    )
    loadgen_cpus: list[int] | None = Field(None, description="pin the load generator to these CPUs")
    injector_cpus: list[int] | None = Field(
        None, description="the network proxy: one worker thread pinned on each of these CPUs"
    )
    server: ServerPlace | None = Field(None, description="with `cluster:`: the server's host")
    loadgen: LoadgenPlace | None = Field(
        None, description="with `cluster:`: the load generator's hosts"
    )

    @model_validator(mode="after")
    def _one_way(self) -> Placement:
        if self.server_cpus is not None and self.server_cores is not None:
            raise ValueError("give server_cpus or server_cores, not both")
        if (
            self.server is not None
            and self.server.cpus is not None
            and (self.server_cpus is not None or self.server_cores is not None)
        ):
            raise ValueError("give server.cpus or server_cpus/server_cores, not both")
        if (
            self.loadgen is not None
            and self.loadgen.cpus is not None
            and self.loadgen_cpus is not None
        ):
            raise ValueError("give loadgen.cpus or loadgen_cpus, not both")
        allowed = sorted(os.sched_getaffinity(0))
        for name in ("server_cpus", "loadgen_cpus", "injector_cpus"):
            for cpu in getattr(self, name) or []:
                if cpu not in allowed:
                    raise ValueError(
                        f"{name}: CPU {cpu} is not available here (usable CPUs: {allowed})"
                    )
        if self.server_cores is not None and self.server_cores > len(allowed):
            raise ValueError(
                f"server_cores: {self.server_cores} > the {len(allowed)} CPUs usable here"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        # The host blocks and injector_cpus are left out while unset, so a placement without
        # them dumps (and hashes into its cell id) exactly as before they existed.
        out = handler(self)
        for key in ("server", "loadgen", "injector_cpus"):
            if out.get(key) is None:
                out.pop(key, None)
        return out

    @property
    def placed(self) -> bool:
        """Whether a host is named (only meaningful with `cluster:`)."""
        return bool((self.server and self.server.host) or (self.loadgen and self.loadgen.hosts))

    @property
    def server_cpu_list(self) -> list[int] | None:
        if self.server is not None and self.server.cpus is not None:
            return self.server.cpus
        if self.server_cores is not None:
            return sorted(os.sched_getaffinity(0))[: self.server_cores]
        return self.server_cpus

    @property
    def loadgen_cpu_list(self) -> list[int] | None:
        if self.loadgen is not None and self.loadgen.cpus is not None:
            return self.loadgen.cpus
        return self.loadgen_cpus

    def server_host(self, hosts: list[str]) -> str:
        """The server's host among `hosts` (default: the first)."""
        return self.server.host if self.server and self.server.host else hosts[0]

    def loadgen_hosts(self, hosts: list[str]) -> list[str]:
        """The load generator's hosts (default: every host but the server's, or the server's
        when it is the only one)."""
        if self.loadgen and self.loadgen.hosts:
            return list(self.loadgen.hosts)
        rest = [h for h in hosts if h != self.server_host(hosts)]
        return rest or [self.server_host(hosts)]
