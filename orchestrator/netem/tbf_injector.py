"""The tbf backend: `tc qdisc ... tbf` (a token bucket) on both veth ends of the server's
namespace (tc_injector.py): bandwidth only, in aggregate over all connections. Needs root.
"""

from __future__ import annotations

from ..errors import PerfctlError
from ..experiment.network import Network
from .commands import tbf_qdisc_commands
from .namespace import Netns
from .tc_injector import TcInjector


class TbfInjector(TcInjector):
    """tc tbf (token bucket) on both veth ends: spec.bandwidth_bps each way, aggregate over all
    connections. Bandwidth only (Network refuses delay/jitter/loss with backend tbf)."""

    backend = kind = "tbf"

    def __init__(self, spec: Network):
        if not spec.has_bandwidth:
            raise PerfctlError("backend tbf needs a bandwidth (e.g. bandwidth: 10mbit)")
        super().__init__(spec)

    def qdisc_commands(self, ns: Netns) -> list[list[str]]:
        return tbf_qdisc_commands(self.spec, ns.name, ns.host_if, ns.ns_if)
