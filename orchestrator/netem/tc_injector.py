"""What the tc backends (netem_injector.py, tbf_injector.py) share: the server in a fresh
network namespace joined to the host by veth, a qdisc on each veth end ("up", client -> server,
on the host end; "down" in the namespace), and a probe of TCP connect() times through them
(SYN -> RST), with a bulk upload to a sink inside the namespace for the bandwidth. Needs root.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from abc import abstractmethod

from ..errors import PerfctlError
from ..experiment.network import Network
from ..proc.process import spawn_until_line, terminate
from . import probe as _probe
from .base import Injector, bulk_bytes
from .commands import netns_exec
from .namespace import Netns, qdisc_status, run


class TcInjector(Injector):
    """Server inside a fresh network namespace joined by veth; qdiscs on both veth ends."""

    kind = ""

    def __init__(self, spec: Network):
        super().__init__(spec)
        ok, why = qdisc_status(self.kind)
        if not ok:
            raise PerfctlError(
                f"network backend {self.backend} is not available on this host: {why}. "
                f"Use `backend: proxy` in the experiment's network block (perfctl-proxy emulates "
                f"delay, jitter, loss and bandwidth in user space), or run `perfctl doctor`."
            )
        self.ns: Netns | None = None
        self.target: tuple[str, int] | None = None
        self._sink: subprocess.Popen | None = None

    @abstractmethod
    def qdisc_commands(self, ns: Netns) -> list[list[str]]: ...

    def prepare(self) -> None:
        if self.ns is not None:
            return
        self.ns = Netns.create()
        self.netns = self.ns.name
        try:
            for cmd in self.qdisc_commands(self.ns):
                run(cmd)
        except BaseException:
            self.stop()
            raise

    @property
    def bind_host(self) -> str:
        self.prepare()
        return self.ns.ns_ip

    def wrap_command(self, argv: list[str]) -> list[str]:
        self.prepare()
        return netns_exec(self.ns.name, list(argv))

    def start(self, target_host: str, target_port: int) -> tuple[str, int]:
        self.prepare()
        if target_host in ("127.0.0.1", "localhost", "::1"):
            raise PerfctlError(
                f"with backend {self.backend} the server runs in namespace {self.ns.name} and "
                f"must listen on {self.ns.ns_ip} (or 0.0.0.0), not {target_host}: its loopback "
                "is not reachable from the host. Start it with inj.wrap_command(argv) and "
                "--host inj.bind_host."
            )
        self.target = (self.ns.ns_ip, int(target_port))
        self._started = True
        return self.target

    def probe(self, samples: int = 20) -> _probe.ProbeResult:
        self.prepare()
        spec = self.state_now()
        # a port nothing listens on: the RST answer crosses the path like a SYN-ACK would
        port = 9 if not self.target or self.target[1] != 9 else 10
        rtts = _probe.connect_rtt_samples(
            self.ns.ns_ip, port, samples=self.probe_samples(spec, samples)
        )
        base = _probe.connect_rtt_samples("127.0.0.1", _closed_local_port(), samples=10)
        res = _probe.ProbeResult(
            method="tcp-connect",
            rtt_ms=rtts,
            baseline_ms=sorted(base)[len(base) // 2],
            expected_added_ms=self.expected_p50_ms(spec),
        )
        res.notes.append(
            f"connect() time to {self.ns.ns_ip}:{port} (SYN -> RST through the veth "
            "qdiscs); baseline = connect() to a closed port on 127.0.0.1"
        )
        up = spec.bandwidth_up_bps
        if up:
            res.expected_bps = up
            res.throughput_bps = self._sink_throughput(bulk_bytes(up))
            res.notes.append(
                "throughput: bulk upload to a sink inside the namespace (up direction)"
            )
        return res

    def probed_bandwidth_bps(self, spec: Network) -> float | None:
        return spec.bandwidth_up_bps

    def held_back_ms(self, spec: Network) -> float:
        return 1000.0  # a lost SYN or RST: the SYN is sent again after TCP's initial 1 s RTO

    def _sink_throughput(self, nbytes: int) -> float:
        argv = netns_exec(self.ns.name, [sys.executable, "-c", _probe.SINK_CODE, self.ns.ns_ip])
        proc, line, err = spawn_until_line(argv, 10.0, "the throughput sink in the namespace")
        err.close()
        self._sink = proc
        try:
            if not line.isdigit():
                raise PerfctlError("the throughput sink in the namespace did not start")
            return _probe.sink_throughput_bps(self.ns.ns_ip, int(line), nbytes)
        finally:
            terminate(proc, grace_s=2.0)
            self._sink = None

    def stop(self) -> None:
        if self._sink is not None:
            terminate(self._sink, grace_s=1.0)
            self._sink = None
        ns, self.ns = self.ns, None
        if ns is not None:
            ns.delete()
        self.netns = None

    def describe(self) -> dict:
        d = super().describe()
        if self.ns:
            d.update(
                netns=self.ns.name,
                host_if=self.ns.host_if,
                ns_if=self.ns.ns_if,
                ns_ip=self.ns.ns_ip,
                qdiscs=[" ".join(c) for c in self.qdisc_commands(self.ns)],
            )
        return d


def _closed_local_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
