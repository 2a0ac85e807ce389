"""Network emulation for perfctl: latency, jitter, loss and bandwidth between client and server.

Public API (see injectors.py for the runner's call sequence):

    NetworkSpec.from_config(mapping)      -> NetworkSpec (PerfctlError on bad input)
    spec.expected_rtt_ms() / spec.expected_rtt_p50_ms()
    choose_backend(spec) -> "proxy" | "netem" | "tbf"
    make_injector(spec)  -> ProxyInjector | NetemInjector | TbfInjector
    verify(expected_ms, measured_ms) -> (ok, reason)
    backend_status(name) -> (works, reason);  host_settings() -> dict (doctor.py)
"""
from .injectors import (BACKENDS, Injector, NetemInjector, ProxyInjector, TbfInjector,
                        backend_status, choose_backend, make_injector)
from .build import build_proxy
from .probe import ProbeResult
from .spec import NetworkSpec
from .verify import verify, verify_bandwidth

__all__ = ["BACKENDS", "Injector", "NetemInjector", "NetworkSpec", "ProbeResult", "ProxyInjector",
           "TbfInjector", "backend_status", "build_proxy", "choose_backend", "make_injector",
           "verify", "verify_bandwidth"]
