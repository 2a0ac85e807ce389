"""`cluster:`: run servers and load-generator shards on the hosts of a Dask distributed cluster.

    cluster:                                      # an existing cluster; hosts = worker names
      scheduler: tls://10.0.0.5:8786
      tls: {ca: certs/ca.pem, cert: certs/client.pem, key: certs/client-key.pem}
    cluster: {local: {hosts: 3}}                  # perfctl makes hosts h1..h3 on this machine
                                                  # (network namespaces joined by a bridge)

Dask runs the pickled functions it is sent, so a cluster anyone can reach runs anyone's code:
every cluster speaks mutual TLS (each end shows a certificate of the cluster's CA). A `tcp://`
scheduler is refused unless it is on loopback or `insecure: true` is written, and then the
summary, run.json and the report say so. The local cluster makes a CA and certificates for
each run (`insecure: true` makes it plain TCP, for comparisons).

Without `cluster:` nothing of Dask is imported or started. The clock bound
(`max_clock_uncertainty`, default 5 ms) is the largest uncertainty (RTT/2 of the best of
several NTP-style exchanges) of a load-generator host's clock offset that a trial accepts;
above it the shards may not have started together and the trial is invalid.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from .base import FrozenModel, Seconds

SCHEDULER = re.compile(r"^(tcp|tls)://([^\s/:]+):\d{1,5}$")
INSECURE_WARNING = (
    "the cluster speaks plain TCP without authentication: anyone who can "
    "reach the scheduler or a worker can run any code on every host"
)


def loopback(host: str) -> bool:
    """Whether host names this machine's loopback (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Tls(FrozenModel):
    """This end's TLS files (PEM), made by `perfctl cluster certs`; relative paths are from the
    experiment file's directory."""

    ca: Path = Field(description="the cluster CA's certificate (ca.pem)")
    cert: Path = Field(description="this client's certificate, signed by that CA (client.pem)")
    key: Path = Field(description="its private key (client-key.pem), readable by you alone")


DEFAULT_CLOCK_BOUND_S = 0.005


class LocalCluster(FrozenModel):
    """Hosts h1..hN, each a network namespace with its own address, on this machine."""

    hosts: int = Field(ge=1, le=16, description="how many namespace hosts (h1..hN)")

    @property
    def host_names(self) -> list[str]:
        return [f"h{i}" for i in range(1, self.hosts + 1)]


class Cluster(FrozenModel):
    """Where the hosts come from: an existing scheduler, or a local namespace cluster."""

    scheduler: str | None = Field(
        None, description="tls://HOST:PORT of a running scheduler (tcp:// needs `insecure`)"
    )
    tls: Tls | None = Field(
        None, description="the certificate files for a tls:// scheduler (mutual TLS)"
    )
    insecure: bool = Field(
        False,
        description="allow plain TCP without authentication: a tcp:// scheduler off loopback, "
        "or a local cluster without TLS; warned about in the summary, run.json and report",
    )
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
                "give exactly one of `scheduler: tls://HOST:PORT` (an existing "
                "Dask cluster) or `local: {hosts: N}`"
            )
        if self.scheduler is not None:
            m = SCHEDULER.match(self.scheduler)
            if m.group(1) == "tls" and self.tls is None:
                raise ValueError(
                    "a tls:// scheduler needs `tls: {ca: ca.pem, cert: client.pem, key: "
                    "client-key.pem}` (make them with `perfctl cluster certs DIR --hosts ...`)"
                )
            if m.group(1) == "tcp" and self.tls is not None:
                raise ValueError("`tls:` is given but the scheduler is tcp://; write tls://")
            if m.group(1) == "tcp" and not loopback(m.group(2)) and not self.insecure:
                raise ValueError(
                    f"scheduler {self.scheduler} is plain TCP, without authentication, off "
                    "this machine: anyone who reaches it can run any code on every host. "
                    "Use tls:// with `tls:` certificates (docs/clusters.md), or write "
                    "`insecure: true` to accept that"
                )
        elif self.tls is not None:
            raise ValueError("`tls:` is for a scheduler; the local cluster makes its own")
        return self

    @property
    def uses_tls(self) -> bool:
        if self.local is not None:
            return not self.insecure
        return self.scheduler.startswith("tls://")

    @property
    def warning(self) -> str | None:
        """The insecure-cluster warning, or None when the cluster speaks TLS."""
        return None if self.uses_tls else INSECURE_WARNING

    @property
    def known_hosts(self) -> list[str] | None:
        """The host names known before connecting (local mode), else None."""
        return self.local.host_names if self.local else None
