"""Injectors: put a Network between the load generator and the server. This module chooses the
backend and makes its injector.

The runner's sequence, the same for every backend:

    inj = make_injector(spec)          # choose_backend(spec) decides for backend: auto
    inj.prepare()                      # build the proxy / create the namespace + qdiscs
    argv = inj.wrap_command(argv)      # identity for proxy; `ip netns exec NS ...` for netem/tbf
    # start the server with argv, bound to inj.bind_host (127.0.0.1, or the namespace address)
    host, port = inj.start(inj.bind_host, server_port)    # where the load generator connects
    result = inj.probe(samples=20)     # RTT (and throughput if bandwidth) through the path
    ok, reason = inj.check(result)     # verify() against the spec
    ...
    inj.stop()                         # idempotent; also via `with make_injector(spec) as inj:`

Backends, one file each, behind the interface of base.py:
  proxy  proxy_injector.py: perfctl-proxy (C, epoll + timerfd) on 127.0.0.1 in its own
         process group. Works on any Linux; delay/jitter/loss are applied per chunk at the TCP
         level.
  netem  netem_injector.py: the server in a network namespace joined by veth (tc_injector.py);
         `tc qdisc ... netem` on both ends (real packet delay/loss). Needs root and sch_netem
         in the kernel.
  tbf    tbf_injector.py: like netem but with `tc qdisc ... tbf`: bandwidth only. Needs root.

How tc and the proxy spell each setting on their command lines is commands.py's; what the
probe should measure is expected.py's.
"""

from __future__ import annotations

from ..experiment.network import Network
from .base import Injector
from .namespace import qdisc_status
from .netem_injector import NetemInjector
from .proxy_injector import ProxyInjector, proxy_status
from .tbf_injector import TbfInjector

BACKENDS = ("proxy", "netem", "tbf")


def backend_status(name: str) -> tuple[bool, str]:
    """(works on this host, why / why not) for 'proxy', 'netem' or 'tbf'."""
    if name == "proxy":
        return proxy_status()
    if name in ("netem", "tbf"):
        return qdisc_status(name)
    raise ValueError(f"unknown backend {name!r}")


def backends_report() -> list[dict]:
    """[{backend, works, reason}] for proxy, netem, tbf."""
    return [
        {"backend": b, "works": ok, "reason": why}
        for b in BACKENDS
        for ok, why in [backend_status(b)]
    ]


def choose_backend(spec: Network) -> str:
    """The backend for `spec`: its own unless 'auto'; for auto netem where it works and the
    spec needs nothing only the proxy injects (reset, blackhole), else proxy (tbf only when
    asked for)."""
    if spec.backend != "auto":
        return spec.backend
    return "netem" if not spec.proxy_only and backend_status("netem")[0] else "proxy"


def make_injector(spec: Network, **kwargs) -> Injector:
    """An injector for spec using choose_backend(spec). kwargs (seed, cpus, ...) go to the
    proxy's constructor; the namespace backends take none."""
    cls = {"proxy": ProxyInjector, "netem": NetemInjector, "tbf": TbfInjector}[choose_backend(spec)]
    return cls(spec, **kwargs) if cls is ProxyInjector else cls(spec)
