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
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from abc import ABC, abstractmethod
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.network import Network
from ..proc.process import spawn_until_line, terminate
from . import probe as _probe
from .build import build_proxy
from .commands import (
    netem_qdisc_commands,
    netem_schedule_commands,
    netns_exec,
    proxy_argv,
    tbf_qdisc_commands,
)
from .namespace import Netns, qdisc_status, run
from .verify import (
    JITTER_MIN_MS,
    held_threshold_ms,
    verify,
    verify_bandwidth,
    verify_jitter,
    verify_loss,
)

BACKENDS = ("proxy", "netem", "tbf")
_live: weakref.WeakSet[Injector] = weakref.WeakSet()


def backend_status(name: str) -> tuple[bool, str]:
    """(works on this host, why / why not) for 'proxy', 'netem' or 'tbf'."""
    if name == "proxy":
        if (Path(__file__).parent / "build" / "perfctl-proxy").is_file() or (
            shutil.which("make") and (shutil.which("gcc") or shutil.which("cc"))
        ):
            return True, "perfctl-proxy (built on demand with gcc/make); any Linux, no root needed"
        return False, "needs gcc and make to build perfctl-proxy (apt-get install gcc make)"
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
    def prepare(self) -> None:  # noqa: B027 (an optional hook: most backends need nothing)
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

    # -- schedule ------------------------------------------------------------------------
    def start_schedule(self, anchor_ns: int) -> None:  # noqa: B027 (optional: a static path has none)
        """Run spec.schedule from anchor_ns (CLOCK_MONOTONIC, = time.perf_counter_ns()): step k
        takes effect at anchor_ns + at_k. The load generator's start instant is the anchor."""

    def changes(self) -> list[dict]:
        """The schedule steps applied so far: [{step, due_ns, applied_ns}] (step 1 = the first
        `schedule` entry)."""
        return []

    def state_now(self) -> Network:
        """The network in force now: the spec, or its last applied schedule step."""
        done = self.changes()
        return self.spec.schedule[done[-1]["step"] - 1].state if done else self.spec

    # -- checks -------------------------------------------------------------------------
    #: how long a lost probe round trip is held back (proxy: the spec's rto; netem: TCP's
    #: initial SYN retransmission timeout, 1 s, since the probe is a connect())
    def held_back_ms(self, spec: Network) -> float:
        return spec.rto_ms

    def probe_samples(self, spec: Network, samples: int = 20) -> int:
        """Round trips to probe: `samples`, or enough (up to 200, ~4 s of path time) for the
        jitter-shape and loss checks when those apply."""
        if spec.jitter_ms >= JITTER_MIN_MS or spec.has_loss:
            per_ms = max(
                spec.expected_rtt_ms() + 2 * spec.loss_per_chunk * self.held_back_ms(spec), 1.0
            )
            return int(min(200, max(samples, 4000.0 / per_ms)))
        return samples

    def check(self, result: _probe.ProbeResult, state: Network | None = None) -> tuple[bool, str]:
        """Every check that applies to `state` (default: the network in force now, state_now()):
        added RTT p50, the jitter distribution, the loss rate, the bandwidth. Returns (ok,
        reasons: the failed checks first)."""
        spec = state or self.state_now()
        good: list[str] = []
        bad: list[str] = []

        def add(ok_why: tuple[bool, str]) -> None:
            (good if ok_why[0] else bad).append(ok_why[1])

        add(verify(spec.expected_rtt_p50_ms(), result.added_p50_ms))
        added = result.added_ms
        if spec.jitter_ms >= JITTER_MIN_MS and len(added) >= 10 and self.checks_jitter_shape(spec):
            add(verify_jitter(added, spec.added_rtt_samples_ms(20_000)))
        if spec.has_loss and len(added) >= 10:
            held = self.held_back_ms(spec)
            timed = spec.model_copy(update={"rto_ms": held})
            no_loss = timed.model_copy(update={"loss": 0.0, "loss_burst": None})
            thr = held_threshold_ms(no_loss.added_rtt_samples_ms(20_000), held)
            share = float((timed.added_rtt_samples_ms(100_000) > thr).mean())
            add(verify_loss(added, thr, share))
        bw = self.probed_bandwidth_bps(spec)
        if bw and result.throughput_bps:
            add(verify_bandwidth(bw, result.throughput_bps))
        return not bad, "; ".join(bad + good)

    def probed_bandwidth_bps(self, spec: Network) -> float | None:
        """The rate the probe's bulk transfer should see (proxy echo: out and back)."""
        return spec.path_bandwidth_bps

    def checks_jitter_shape(self, spec: Network) -> bool:
        """Whether this backend's jitter has the spec's exact law (netem's correlation does
        not keep it)."""
        return True

    def describe(self) -> dict:
        """What to record in run.json about the injected network."""
        return {
            "backend": self.backend,
            "spec": self.spec.model_dump(),
            "label": self.spec.describe(),
            "profile_source": self.spec.source(),
            "netns": self.netns,
            "expected_rtt_ms": self.spec.expected_rtt_ms(),
            "expected_rtt_p50_ms": self.spec.expected_rtt_p50_ms(),
            "changes": self.changes(),
        }

    def __enter__(self) -> Injector:
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
_CHANGE_RE = re.compile(r"perfctl-proxy change step=(\d+) due_ns=(\d+) applied_ns=(\d+)")
STATS_WAIT_S = 5.0


def parse_proxy_stats(text: str) -> dict[str, int]:
    """The counters of the last `perfctl-proxy stats:` line in text ({} if none)."""
    lines = [ln for ln in text.splitlines() if "perfctl-proxy stats:" in ln]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", lines[-1])} if lines else {}


class ProxyInjector(Injector):
    """perfctl-proxy between client and server. `stats` holds the proxy's counters after stop()."""

    backend = "proxy"

    def __init__(
        self,
        spec: Network,
        seed: int | None = None,
        listen_host: str = "127.0.0.1",
        queue_limit: int | None = None,
        start_timeout_s: float = 10.0,
        cpus: list[int] | None = None,
    ):
        super().__init__(spec)
        self.seed = seed
        self.cpus = list(cpus) if cpus else None
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
        self.argv = proxy_argv(
            self.binary,
            self.spec,
            f"{self.listen_host}:0",
            f"{target_host}:{target_port}",
            echo_listen=f"{self.listen_host}:0",
            seed=self.seed,
            queue_limit=self.queue_limit,
            cpus=self.cpus,
            schedule_anchor="stdin",
        )
        self.proc, line, self._stderr = spawn_until_line(
            self.argv, self.start_timeout_s, "perfctl-proxy", stdin_pipe=bool(self.spec.schedule)
        )
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
        spec = self.state_now()
        n = self.probe_samples(spec, samples)
        timeout = (
            10.0
            + 3 * (spec.rto_ms / 1e3 if spec.has_loss else 0)
            + spec.expected_rtt_ms() / 1e3 * 4
        )
        if self._baseline_ms is None:
            self._baseline_ms = _proxy_baseline_ms(self.binary)
        self.live_stats()  # opens a fresh window of release-time errors
        rtts = _probe.echo_rtt_samples(*self.echo_address, samples=n, timeout_s=timeout)
        res = _probe.ProbeResult(
            method="echo-rtt",
            rtt_ms=rtts,
            baseline_ms=self._baseline_ms,
            expected_added_ms=spec.expected_rtt_p50_ms(),
        )
        res.notes.append(
            "16-byte request/response round trips to the proxy's built-in echo at the "
            "far end of the emulated path; baseline = same through an unshaped proxy"
        )
        st = self.live_stats()
        if st.get("win_released"):
            res.released = st["win_released"]
            res.release_err_p50_us = st["win_release_err_p50_ns"] / 1e3
            res.release_err_p99_us = st["win_release_err_p99_ns"] / 1e3
        if spec.path_bandwidth_bps:
            res.expected_bps = spec.path_bandwidth_bps
            res.throughput_bps = _probe.echo_throughput_bps(
                *self.echo_address, _bulk_bytes(spec.path_bandwidth_bps), timeout_s=timeout + 30
            )
        return res

    def _stderr_now(self) -> str:
        """The proxy's stderr so far, read without moving the file offset it writes at."""
        if self._stderr is None:
            return getattr(self, "stderr_text", "")
        fd = self._stderr.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def live_stats(self) -> dict[str, int]:
        """SIGUSR1: the proxy prints its counters (release errors over the window since the
        previous line); {} when it is not running or does not answer within 5 s."""
        if self.proc is None or self.proc.poll() is not None:
            return {}
        before = self._stderr_now().count("perfctl-proxy stats:")
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + STATS_WAIT_S
        while time.monotonic() < deadline:
            text = self._stderr_now()
            if text.count("perfctl-proxy stats:") > before and text.endswith("\n"):
                return parse_proxy_stats(text)
            time.sleep(0.005)
        return {}

    def start_schedule(self, anchor_ns: int) -> None:
        if not self.spec.schedule:
            return
        if self.proc is None or self.proc.stdin is None:
            raise PerfctlError("start_schedule() needs a started ProxyInjector with a schedule")
        self.proc.stdin.write(f"start {int(anchor_ns)}\n".encode())
        self.proc.stdin.flush()

    def changes(self) -> list[dict]:
        return [
            {"step": int(a), "due_ns": int(b), "applied_ns": int(c)}
            for a, b, c in _CHANGE_RE.findall(self._stderr_now())
        ]

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            terminate(proc)
            if proc.stdin is not None:
                proc.stdin.close()
        if self._stderr is not None:
            try:
                text = self._stderr_now()
                self.stats = parse_proxy_stats(text) or self.stats
                self.stderr_text = text
            finally:
                self._stderr.close()
                self._stderr = None

    def describe(self) -> dict:
        d = super().describe()
        d.update(
            argv=self.argv,
            stats=self.stats,
            cpus=self.cpus,
            semantics="per chunk at the TCP level; bandwidth aggregate per direction",
        )
        return d


def _proxy_baseline_ms(binary: Path | None, samples: int = 20) -> float:
    """p50 RTT through an unshaped proxy's echo: what the probe would read with zero delay."""
    if binary is None:
        return 0.0
    proc, line, err = spawn_until_line(
        [
            str(binary),
            "--listen",
            "127.0.0.1:0",
            "--to",
            "127.0.0.1:9",
            "--echo-listen",
            "127.0.0.1:0",
        ],
        10.0,
        "perfctl-proxy",
    )
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
            expected_added_ms=spec.expected_rtt_p50_ms(),
        )
        res.notes.append(
            f"connect() time to {self.ns.ns_ip}:{port} (SYN -> RST through the veth "
            "qdiscs); baseline = connect() to a closed port on 127.0.0.1"
        )
        up = spec.bandwidth_up_bps
        if up:
            res.expected_bps = up
            res.throughput_bps = self._sink_throughput(_bulk_bytes(up))
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


class NetemInjector(_NamespaceInjector):
    """tc netem on both veth ends: delay_up on the host end, delay_down in the namespace.
    Loss here is real packet loss (TCP retransmits on its own RTO); rto is ignored."""

    backend = kind = "netem"

    def __init__(self, spec: Network):
        if spec.proxy_only:
            raise PerfctlError(
                "reset and blackhole are faults only the proxy injects (tc netem "
                "has none); use `backend: proxy` in the network block"
            )
        super().__init__(spec)
        self._applied: list[dict] = []
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    def qdisc_commands(self, ns: Netns) -> list[list[str]]:
        return netem_qdisc_commands(self.spec, ns.name, ns.host_if, ns.ns_if)

    def checks_jitter_shape(self, spec: Network) -> bool:
        return not spec.jitter_correlation  # netem's correlation narrows the marginal law

    def start_schedule(self, anchor_ns: int) -> None:
        """A thread runs `tc qdisc change` for each step at anchor_ns + at (netem_schedule_commands)."""
        if not self.spec.schedule or self._thread is not None:
            return
        self.prepare()
        plan = netem_schedule_commands(self.spec, self.ns.name, self.ns.host_if, self.ns.ns_if)

        def runner() -> None:
            for k, (at_s, cmds) in enumerate(plan, start=1):
                due = anchor_ns + int(at_s * 1e9)
                if self._cancel.wait(max(0.0, (due - time.perf_counter_ns()) / 1e9)):
                    return
                for cmd in cmds:
                    run(cmd)
                self._applied.append(
                    {"step": k, "due_ns": due, "applied_ns": time.perf_counter_ns()}
                )

        self._thread = threading.Thread(target=runner, name="netem-schedule", daemon=True)
        self._thread.start()

    def changes(self) -> list[dict]:
        return list(self._applied)

    def stop(self) -> None:
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        super().stop()


class TbfInjector(_NamespaceInjector):
    """tc tbf (token bucket) on both veth ends: spec.bandwidth_bps each way, aggregate over all
    connections. Bandwidth only (Network refuses delay/jitter/loss with backend tbf)."""

    backend = kind = "tbf"

    def __init__(self, spec: Network):
        if not spec.has_bandwidth:
            raise PerfctlError("backend tbf needs a bandwidth (e.g. bandwidth: 10mbit)")
        super().__init__(spec)

    def qdisc_commands(self, ns: Netns) -> list[list[str]]:
        return tbf_qdisc_commands(self.spec, ns.name, ns.host_if, ns.ns_if)


@atexit.register
def _stop_all() -> None:
    """Namespaces and qdiscs are no processes, so proc/process.py cannot end them: remove
    them at interpreter exit (their processes are already the supervisor's)."""
    for inj in list(_live):
        try:
            inj.stop()
        except Exception:
            pass
