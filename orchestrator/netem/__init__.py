"""Network injection between the load generator and the server, behind one Injector interface
(base.py: prepare, wrap_command, start, probe, check, stop) with one file per backend
(proxy_injector.py, netem_injector.py, tbf_injector.py), and the probe that checks it.

    make_injector(network) -> ProxyInjector | NetemInjector | TbfInjector
    choose_backend(network) -> "proxy" | "netem" | "tbf";  backend_status(name) -> (works, why)
    verify(expected_ms, measured_ms) -> (ok, reason)

What to inject is an experiment.network.Network (the `network:` block, validated there).
"""

from .build import build_proxy
from .injectors import (
    BACKENDS,
    Injector,
    NetemInjector,
    ProxyInjector,
    TbfInjector,
    backend_status,
    backends_report,
    choose_backend,
    make_injector,
)
from .probe import ProbeResult
from .verify import verify, verify_bandwidth

__all__ = [
    "BACKENDS",
    "Injector",
    "NetemInjector",
    "ProbeResult",
    "ProxyInjector",
    "TbfInjector",
    "backend_status",
    "backends_report",
    "build_proxy",
    "choose_backend",
    "make_injector",
    "verify",
    "verify_bandwidth",
]
