"""`cluster:`: run servers and load-generator shards on the hosts of a Dask distributed cluster.

    cluster: {scheduler: tcp://10.0.0.5:8786}     # an existing cluster; hosts = worker names
    cluster: {local: {hosts: 3}}                  # perfctl makes hosts h1..h3 on this machine
                                                  # (network namespaces joined by a bridge)

Without `cluster:` nothing of Dask is imported or started. The clock bound
(`max_clock_uncertainty`, default 5 ms) is the largest uncertainty (RTT/2 of the best of
several NTP-style exchanges) of a load-generator host's clock offset that a trial accepts;
above it the shards may not have started together and the trial is invalid.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from .base import FrozenModel, Seconds

SCHEDULER = re.compile(r"^(tcp|tls)://[^\s/:]+:\d{1,5}$")
DEFAULT_CLOCK_BOUND_S = 0.005


class LocalCluster(FrozenModel):
    """Hosts h1..hN, each a network namespace with its own address, on this machine."""

    hosts: int = Field(ge=1, le=16, description="how many namespace hosts (h1..hN)")

    @property
    def host_names(self) -> list[str]:
        return [f"h{i}" for i in range(1, self.hosts + 1)]


class Cluster(FrozenModel):
    """Where the hosts come from: an existing scheduler, or a local namespace cluster."""

    scheduler: str | None = Field(None, description="tcp://HOST:PORT of a running scheduler")
    local: LocalCluster | None = Field(
        None, description="make the hosts on this machine instead (root, iproute2)"
    )
    connect_timeout_s: Seconds = Field(
        10.0,
        alias="connect_timeout",
        gt=0,
        le=600,
        description="how long to try to reach the scheduler",
    )
    max_clock_uncertainty_s: Seconds = Field(
        DEFAULT_CLOCK_BOUND_S,
        alias="max_clock_uncertainty",
        gt=0,
        le=10,
        description="a trial whose clock-offset uncertainty on any host exceeds this is invalid",
    )
    host_return_s: Seconds = Field(
        15.0,
        alias="host_return",
        ge=0,
        le=3600,
        description="how long a lost host may take to come back before the run stops",
    )

    @field_validator("scheduler")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None and not SCHEDULER.match(v):
            raise ValueError(f"scheduler must look like tcp://HOST:8786, not {v!r}")
        return v

    @model_validator(mode="after")
    def _one_way(self) -> Cluster:
        if (self.scheduler is None) == (self.local is None):
            raise ValueError(
                "give exactly one of `scheduler: tcp://HOST:PORT` (an existing "
                "Dask cluster) or `local: {hosts: N}`"
            )
        return self

    @property
    def known_hosts(self) -> list[str] | None:
        """The host names known before connecting (local mode), else None."""
        return self.local.host_names if self.local else None
