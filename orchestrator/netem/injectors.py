"""Injectors: put a Network between the load generator and the server.

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

Backends:
  proxy  perfctl-proxy (C, epoll + timerfd) on 127.0.0.1 in its own process group. Works on
         any Linux; delay/jitter/loss are applied per chunk at the TCP level (see proxy.c).
  netem  the server in a network namespace joined by veth; `tc qdisc ... netem` on both ends
         (real packet delay/loss). Needs root and sch_netem in the kernel.
  tbf    like netem but with `tc qdisc ... tbf`: bandwidth only. Needs root.
"""
from __future__ import annotations

import atexit
import re
import shutil
import socket
import subprocess
import sys
import weakref
from abc import ABC, abstractmethod
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.network import Network
from ..run.process import spawn_until_line, terminate
from . import probe as _probe
from .build import build_proxy
from .commands import netem_qdisc_commands, netns_exec, proxy_argv, tbf_qdisc_commands
from .namespace import Netns, qdisc_status, run
from .verify import verify, verify_bandwidth

BACKENDS = ("proxy", "netem", "tbf")
_live: "weakref.WeakSet[Injector]" = weakref.WeakSet()


def backend_status(name: str) -> tuple[bool, str]:
    """(works on this host, why / why not) for 'proxy', 'netem' or 'tbf'."""
    if name == "proxy":
        if (Path(__file__).parent / "build" / "perfctl-proxy").is_file() or (
                shutil.which("make") and (shutil.which("gcc") or shutil.which("cc"))):
            return True, "perfctl-proxy (built on demand with gcc/make); any Linux, no root needed"
        return False, "needs gcc and make to build perfctl-proxy (apt-get install gcc make)"
    if name in ("netem", "tbf"):
        return qdisc_status(name)
    raise ValueError(f"unknown backend {name!r}")


def backends_report() -> list[dict]:
    """[{backend, works, reason}] for proxy, netem, tbf."""
    return [{"backend": b, "works": ok, "reason": why}
            for b in BACKENDS for ok, why in [backend_status(b)]]


def choose_backend(spec: Network) -> str:
    """The backend for `spec`: its own unless 'auto'; for auto netem where it works, else proxy
    (tbf only when asked for)."""
    if spec.backend != "auto":
        return spec.backend
    return "netem" if backend_status("netem")[0] else "proxy"


def make_injector(spec: Network, **kwargs) -> "Injector":
    """An injector for spec using choose_backend(spec). kwargs go to the backend's constructor."""
    cls = {"proxy": ProxyInjector, "netem": NetemInjector, "tbf": TbfInjector}[choose_backend(spec)]
    return cls(spec, **kwargs)


def _bulk_bytes(bps: float, seconds: float = 0.5) -> int:
    return int(min(max(bps / 8 * seconds, 256 * 1024), 64 * 1024 * 1024))


class Injector(ABC):
    """Common interface. Subclasses: ProxyInjector, NetemInjector, TbfInjector."""

    backend: str = ""
    #: network namespace the server must run in (None: the host's)
    netns: str | None = None

    def __init__(self, spec: Network):
        self.spec = spec
        self._started = False
        _live.add(self)

    # -- set-up -------------------------------------------------------------------------
    def prepare(self) -> None:
        """Everything that must exist before the server starts. Idempotent."""

    @property
    def bind_host(self) -> str:
        """Address the server must listen on."""
        return "127.0.0.1"

    def wrap_command(self, argv: list[str]) -> list[str]:
        """argv to start the server with (inside the namespace for netem/tbf)."""
        return list(argv)

    @abstractmethod
    def start(self, target_host: str, target_port: int) -> tuple[str, int]:
        """Put the emulated path in front of the server at target_host:target_port; return the
        (host, port) the client must connect to."""

    @abstractmethod
    def probe(self, samples: int = 20) -> _probe.ProbeResult:
        """RTT samples through the path (and throughput when bandwidth is set)."""

    @abstractmethod
    def stop(self) -> None:
        """Remove everything start()/prepare() created. Idempotent."""

    # -- checks -------------------------------------------------------------------------
    def check(self, result: _probe.ProbeResult) -> tuple[bool, str]:
        """verify() the probe's added p50 RTT against the spec (and the throughput against the
        bandwidth, if set). Returns (ok, reason)."""
        expected = self.spec.expected_rtt_p50_ms()
        ok, reason = verify(expected, result.added_p50_ms)
        if self.spec.bandwidth_bps and result.throughput_bps:
            ok_bw, why_bw = verify_bandwidth(self.spec.bandwidth_bps, result.throughput_bps)
            if not ok_bw:
                return False, why_bw + ("" if ok else "; " + reason)
            reason += "; " + why_bw
        return ok, reason

    def describe(self) -> dict:
        """What to record in run.json about the injected network."""
        return {"backend": self.backend, "spec": self.spec.model_dump(), "label": self.spec.describe(),
                "netns": self.netns, "expected_rtt_ms": self.spec.expected_rtt_ms(),
                "expected_rtt_p50_ms": self.spec.expected_rtt_p50_ms()}

    def __enter__(self) -> "Injector":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self) -> None:  # best effort; stop() is the real contract
        try:
            self.stop()
        except Exception:
            pass


# ============================================================================ proxy
_LISTEN_RE = re.compile(r"listening on (\S+):(\d+) to \S+(?: echo (\S+):(\d+))?")


class ProxyInjector(Injector):
    """perfctl-proxy between client and server. `stats` holds the proxy's counters after stop()."""

    backend = "proxy"

    def __init__(self, spec: Network, seed: int | None = None, listen_host: str = "127.0.0.1",
                 queue_limit: int | None = None, start_timeout_s: float = 10.0):
        super().__init__(spec)
        self.seed = seed
        self.listen_host = listen_host
        self.queue_limit = queue_limit
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.binary: Path | None = None
        self.address: tuple[str, int] | None = None
        self.echo_address: tuple[str, int] | None = None
        self.stats: dict[str, int] = {}
        self.argv: list[str] = []
        self._stderr = None
        self._baseline_ms: float | None = None

    def prepare(self) -> None:
        if self.binary is None:
            self.binary = build_proxy()

    def start(self, target_host: str, target_port: int) -> tuple[str, int]:
        if self.proc is not None:
            raise PerfctlError("this ProxyInjector is already started; stop() it first")
        self.prepare()
        self.argv = proxy_argv(self.binary, self.spec, f"{self.listen_host}:0",
                               f"{target_host}:{target_port}", echo_listen=f"{self.listen_host}:0",
                               seed=self.seed, queue_limit=self.queue_limit)
        self.proc, line, self._stderr = spawn_until_line(self.argv, self.start_timeout_s,
                                                         "perfctl-proxy")
        m = _LISTEN_RE.search(line)
        if not m:
            self.stop()
            raise PerfctlError(f"perfctl-proxy printed an unexpected first line: {line!r}")
        self.address = (m.group(1), int(m.group(2)))
        self.echo_address = (m.group(3), int(m.group(4)))
        self._started = True
        return self.address

    def probe(self, samples: int = 20) -> _probe.ProbeResult:
        if not self.echo_address:
            raise PerfctlError("probe() needs a started ProxyInjector")
        timeout = 10.0 + 3 * (self.spec.rto_ms / 1e3 if self.spec.loss else 0) + self.spec.expected_rtt_ms() / 1e3 * 4
        if self._baseline_ms is None:
            self._baseline_ms = _proxy_baseline_ms(self.binary)
        rtts = _probe.echo_rtt_samples(*self.echo_address, samples=samples, timeout_s=timeout)
        res = _probe.ProbeResult(method="echo-rtt", rtt_ms=rtts, baseline_ms=self._baseline_ms,
                                 expected_added_ms=self.spec.expected_rtt_p50_ms())
        res.notes.append("16-byte request/response round trips to the proxy's built-in echo at the "
                         "far end of the emulated path; baseline = same through an unshaped proxy")
        if self.spec.bandwidth_bps:
            res.expected_bps = self.spec.bandwidth_bps
            res.throughput_bps = _probe.echo_throughput_bps(*self.echo_address,
                                                            _bulk_bytes(self.spec.bandwidth_bps),
                                                            timeout_s=timeout + 30)
        return res

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            terminate(proc)
        if self._stderr is not None:
            try:
                self._stderr.seek(0)
                text = self._stderr.read().decode(errors="replace")
                m = re.search(r"perfctl-proxy stats: (.*)", text)
                if m:
                    self.stats = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}
                self.stderr_text = text
            finally:
                self._stderr.close()
                self._stderr = None

    def describe(self) -> dict:
        d = super().describe()
        d.update(argv=self.argv, stats=self.stats,
                 semantics="per chunk at the TCP level; bandwidth aggregate per direction")
        return d


def _proxy_baseline_ms(binary: Path | None, samples: int = 20) -> float:
    """p50 RTT through an unshaped proxy's echo: what the probe would read with zero delay."""
    if binary is None:
        return 0.0
    proc, line, err = spawn_until_line([str(binary), "--listen", "127.0.0.1:0", "--to",
                                        "127.0.0.1:9", "--echo-listen", "127.0.0.1:0"], 10.0,
                                       "perfctl-proxy")
    try:
        m = _LISTEN_RE.search(line)
        rtts = _probe.echo_rtt_samples(m.group(3), int(m.group(4)), samples=samples)
        return sorted(rtts)[len(rtts) // 2]
    finally:
        terminate(proc)
        err.close()


# ============================================================================ namespaces
class _NamespaceInjector(Injector):
    """Server inside a fresh network namespace joined by veth; qdiscs on both veth ends."""

    kind = ""

    def __init__(self, spec: Network):
        super().__init__(spec)
        ok, why = qdisc_status(self.kind)
        if not ok:
            raise PerfctlError(
                f"network backend {self.backend} is not available on this host: {why}. "
                f"Use `backend: proxy` in the experiment's network block (perfctl-proxy emulates "
                f"delay, jitter, loss and bandwidth in user space), or run `perfctl doctor`.")
        self.ns: Netns | None = None
        self.target: tuple[str, int] | None = None
        self._sink: subprocess.Popen | None = None

    @abstractmethod
    def qdisc_commands(self, ns: Netns) -> list[list[str]]:
        ...

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
                "--host inj.bind_host.")
        self.target = (self.ns.ns_ip, int(target_port))
        self._started = True
        return self.target

    def probe(self, samples: int = 20) -> _probe.ProbeResult:
        self.prepare()
        # a port nothing listens on: the RST answer crosses the path like a SYN-ACK would
        port = 9 if not self.target or self.target[1] != 9 else 10
        rtts = _probe.connect_rtt_samples(self.ns.ns_ip, port, samples=samples)
        base = _probe.connect_rtt_samples("127.0.0.1", _closed_local_port(), samples=10)
        res = _probe.ProbeResult(method="tcp-connect", rtt_ms=rtts,
                                 baseline_ms=sorted(base)[len(base) // 2],
                                 expected_added_ms=self.spec.expected_rtt_p50_ms())
        res.notes.append(f"connect() time to {self.ns.ns_ip}:{port} (SYN -> RST through the veth "
                         "qdiscs); baseline = connect() to a closed port on 127.0.0.1")
        if self.spec.bandwidth_bps:
            res.expected_bps = self.spec.bandwidth_bps
            res.throughput_bps = self._sink_throughput(_bulk_bytes(self.spec.bandwidth_bps))
            res.notes.append("throughput: bulk upload to a sink inside the namespace")
        return res

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
            d.update(netns=self.ns.name, host_if=self.ns.host_if, ns_if=self.ns.ns_if,
                     ns_ip=self.ns.ns_ip, qdiscs=[" ".join(c) for c in self.qdisc_commands(self.ns)])
        return d


def _closed_local_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class NetemInjector(_NamespaceInjector):
    """tc netem on both veth ends: delay_up on the host end, delay_down in the namespace.
    Loss here is real packet loss (TCP retransmits on its own RTO); rto is ignored."""

    backend = kind = "netem"

    def qdisc_commands(self, ns: Netns) -> list[list[str]]:
        return netem_qdisc_commands(self.spec, ns.name, ns.host_if, ns.ns_if)


class TbfInjector(_NamespaceInjector):
    """tc tbf (token bucket) on both veth ends: spec.bandwidth_bps each way, aggregate over all
    connections. Bandwidth only (Network refuses delay/jitter/loss with backend tbf)."""

    backend = kind = "tbf"

    def __init__(self, spec: Network):
        if not spec.bandwidth_bps:
            raise PerfctlError("backend tbf needs a bandwidth (e.g. bandwidth: 10mbit)")
        super().__init__(spec)

    def qdisc_commands(self, ns: Netns) -> list[list[str]]:
        return tbf_qdisc_commands(self.spec, ns.name, ns.host_if, ns.ns_if)


@atexit.register
def _stop_all() -> None:
    """Namespaces and qdiscs are no processes, so run/process.py cannot end them: remove
    them at interpreter exit (their processes are already the supervisor's)."""
    for inj in list(_live):
        try:
            inj.stop()
        except Exception:
            pass
