"""`placement:`: which CPUs the server and the load generator run on."""
from __future__ import annotations

import os

from pydantic import Field, model_validator

from .base import FrozenModel


class Placement(FrozenModel):
    """Where processes run. server_cores: N picks the first N CPUs this process may use
    (usable as a matrix axis: `server_cores: "{cores}"`); server_cpus names them exactly.
    injector_cpus: the network proxy runs one worker thread pinned on each of these CPUs."""

    server_cpus: list[int] | None = None
    server_cores: int | None = Field(None, ge=1, le=4096)
    loadgen_cpus: list[int] | None = None
    injector_cpus: list[int] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> "Placement":
        if self.server_cpus is not None and self.server_cores is not None:
            raise ValueError("give server_cpus or server_cores, not both")
        allowed = sorted(os.sched_getaffinity(0))
        for name in ("server_cpus", "loadgen_cpus", "injector_cpus"):
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
