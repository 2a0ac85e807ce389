"""What runs on a host, inside its Dask worker. Every function here only starts, watches and
stops subprocesses (the server, `python -m loadgen`), through perfctl's supervisor, and
returns their files as bytes: the measurement never runs in the worker's event loop or its
task threads.

Processes started here carry the worker's own PERFCTL_SUPERVISOR mark and are known to the
worker's guardian (proc/guardian.py), so they die with the worker, however it dies. Each also
has a lease: a server outliving its trial by SERVER_LEASE_GRACE_S, or a load generator its
phase by SHARD_GRACE_S, is stopped here even if the coordinator never asks (a perfctl on
another machine killed with -9).

Network: with a `network:` block, the task that starts the server also starts perfctl-proxy
(netem/proxy_injector.py ProxyInjector) on this host's address in front of it, under the same
supervision and lease; shards connect to the proxy. Its probe runs here, before the load and
after it (while the server is still up), exactly as on a single host, and stop_server returns
the network columns and verdicts (run/trial_row.py network_row).

Files: a shard's output stays in a directory on its host after run_shard returns; the
coordinator copies it chunk by chunk (fetch_chunk, CHUNK_BYTES at a time, so neither side holds
a whole requests.parquet in memory), then drop_shard removes it. A directory nobody fetched is
removed after FILES_LEASE_S.

Clocks: the coordinator passes the agreed start instant in its own wall clock plus this
host's measured offset; this host turns it into its own CLOCK_MONOTONIC (perf_counter_ns),
which is what the load generator's `start_at_ns` and every timestamp it records use. So a
latency is always a difference of two readings of one host's clock.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import dask
from distributed import get_worker

from loadgen.spec import LoadSpec

from ..experiment.network import Network
from ..measure import noise
from ..measure.sampler import SAMPLE_INTERVAL_S, ResourceSampler
from ..measure.sock_diag import TCP_ESTABLISHED, SockDiag
from ..netem.proxy_injector import ProxyInjector
from ..proc.process import spawn, tail, terminate
from ..proc.tree_watch import tree_pids
from ..run.bundled import ROOT
from ..run.server import ServerProcess
from ..run.trial_row import network_row

SHARD_GRACE_S = 30.0
FILES_LEASE_S = 3600.0  # a shard's files wait this long for the coordinator to fetch them
CHUNK_BYTES = 8 << 20  # one fetch_chunk: what a task result carries at most
SHARD_FILES = ("summary.json", "digest.json", "latency.hlog", "requests.parquet")
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
ESTABLISHED = "01"

_lock = threading.Lock()
_procs: dict[str, list[subprocess.Popen]] = {}  # token -> load generators running
_servers: dict[str, ServerSession] = {}  # token -> the trial's server here
_outputs: dict[str, tuple[Path, threading.Timer]] = {}  # token -> a shard's files, its lease


def clock_now() -> int:
    """This host's wall clock (ns): one sample of an NTP-style offset exchange."""
    return time.time_ns()


def perf_at(wall_ns: int) -> int:
    """The perf_counter_ns reading on this host at its wall-clock instant wall_ns."""
    return time.perf_counter_ns() + (wall_ns - time.time_ns())


def host_facts(dask_worker=None) -> dict:
    """What run.json records about this host (client.run passes dask_worker)."""
    host = dask_worker.address.split("://", 1)[-1].rsplit(":", 1)[0] if dask_worker else ""
    return {
        "ip": host,
        "cpus": sorted(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "pid": os.getpid(),
        "nthreads": getattr(getattr(dask_worker, "state", None), "nthreads", 0),
        "profiler": bool(dask.config.get("distributed.worker.profile.enabled", True)),
        "background": background_work(dask_worker),
    }


def background_work(dask_worker) -> dict[str, float]:
    """The worker's periodic callbacks and their intervals in ms (heartbeat and the rest):
    what else a host's worker does while a trial runs there."""
    if dask_worker is None:
        return {}
    return {
        name: float(pc.callback_time)
        for name, pc in sorted(getattr(dask_worker, "periodic_callbacks", {}).items())
    }


def _worker_ip() -> str:
    return get_worker().address.split("://", 1)[-1].rsplit(":", 1)[0]


class ClientWatch:
    """The distinct remote addresses of established TCP connections to one local port, read
    from /proc/net/tcp{,6} of this host (its network namespace) every interval_s."""

    def __init__(self, port: int, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.port = port
        self.addresses: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="client-watch", daemon=True)
        self.interval_s = interval_s

    def start(self) -> ClientWatch:
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(timeout=5)
        return sorted(self.addresses)

    def _loop(self) -> None:
        try:
            diag = SockDiag()
        except OSError:
            diag = None
        try:
            while True:
                self.addresses |= established_peers(self.port, diag)
                if self._stop.wait(self.interval_s):
                    return
        finally:
            if diag is not None:
                diag.close()


def established_peers(port: int, diag: SockDiag | None = None) -> set[str]:
    """Remote IPs of ESTABLISHED connections whose local port is `port`: over netlink
    (measure/sock_diag.py, a fraction of a millisecond) when diag is given, else from
    /proc/net/tcp{,6} (which walks the kernel's whole socket table: milliseconds)."""
    if diag is not None:
        try:
            return {s.dst for s in diag.sockets(port, 1 << TCP_ESTABLISHED)}
        except OSError:
            pass
    out = set()
    for table in TCP_TABLES:
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 4 or f[3] != ESTABLISHED or int(f[1].rsplit(":", 1)[1], 16) != port:
                continue
            out.add(_ip_of(f[2].rsplit(":", 1)[0]))
    return out


def _ip_of(hexaddr: str) -> str:
    """An address as /proc/net/tcp{,6} writes it (host byte order per 32-bit word)."""
    raw = bytes.fromhex(hexaddr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if ip.version == 6 and ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    return str(ip)


@dataclasses.dataclass
class ServerSession:
    server: ServerProcess
    sampler: ResourceSampler
    clients: ClientWatch
    lease: threading.Timer
    workdir: Path
    network: Network | None = None
    injector: ProxyInjector | None = None
    probes: list = dataclasses.field(default_factory=list)


def start_server(
    token: str,
    name: str,
    config,
    cpus: list[int] | None,
    source: str,
    lease_s: float,
    network: Network | None = None,
    seed: int | None = None,
    injector_cpus: list[int] | None = None,
) -> dict:
    """Start one trial's server on this host, listening on the host's address, and wait
    until it is ready; with a network that shapes, perfctl-proxy in front of it on the same
    address, probed once before the load. Returns where the shards connect (the proxy, or
    the server). Raises PerfctlError (as a local trial does) when either cannot start."""
    ip = _worker_ip()
    workdir = Path(tempfile.mkdtemp(prefix=f"perfctl-{token}-"))
    server = ServerProcess(name, config, workdir, cpus, source, host=ip)
    injector = None
    probes: list = []
    try:
        if network is not None and network.shapes:
            injector = ProxyInjector(network, seed=seed, listen_host=ip, cpus=injector_cpus)
            injector.prepare()  # builds perfctl-proxy on this host if it must
        server.start()
        startup_s = server.wait_ready()
        host, port = ip, server.port
        if injector is not None:
            host, port = injector.start(ip, server.port)
            probes.append(("before", injector.probe(), injector.state_now()))
    except BaseException:
        if injector is not None:
            injector.stop()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    watched = set(cpus or os.sched_getaffinity(0))
    sampler = ResourceSampler(server.pid, None, watched).start()
    lease = threading.Timer(lease_s, _expire_server, (token,))
    lease.daemon = True
    # the clients are those of the port the shards connect to (behind a proxy, the server
    # itself sees only the proxy)
    session = ServerSession(
        server, sampler, ClientWatch(port).start(), lease, workdir, network, injector, probes
    )
    with _lock:
        _servers[token] = session
    lease.start()
    return {
        "host": host,
        "port": port,
        "startup_s": startup_s,
        "pid": server.pid,
        "server_port": server.port,
    }


def _expire_server(token: str) -> None:
    with _lock:
        session = _servers.pop(token, None)
    if session is not None:
        _end_server(session)


def _end_server(
    session: ServerSession, probe_after: bool = False
) -> tuple[int | None, bool, bool, list[str]]:
    """Stop the server (and its proxy, probed once more first when probe_after and the
    server is still up): (exit code, alive before, stopped accepting, client addresses)."""
    session.lease.cancel()
    session.sampler.stop()
    clients = session.clients.stop()
    server = session.server
    alive, refuses = server.serving()
    inj = session.injector
    try:
        if inj is not None and alive and probe_after:
            session.probes.append(("after", inj.probe(), inj.state_now()))
    finally:
        if inj is not None:
            inj.stop()
        code = server.stop()
    return code, alive, refuses, clients


def stop_server(
    token: str,
    window_wall_ns: tuple[int, int] | None,
    load_start_wall_ns: int,
    requests: int,
    window_s: float,
) -> dict:
    """Stop the trial's server here; its log, resource samples, liveness, the client
    addresses it saw, and this host's noise readings over the measured window (given in
    this host's wall clock)."""
    with _lock:
        session = _servers.pop(token, None)
    if session is None:
        return {"missing": True}
    load_start_perf = perf_at(load_start_wall_ns)
    code, alive, refuses, clients = _end_server(session, probe_after=True)
    sampler = session.sampler
    pair = None
    if window_wall_ns is not None:
        pair = noise.window_samples(
            sampler.noise, perf_at(window_wall_ns[0]), perf_at(window_wall_ns[1])
        )
    cpus = session.sampler.probe.cpus
    readings = noise.readings(*pair, requests, window_s, cpus) if pair else noise.not_measured()
    log = session.server.log_path
    out = {
        "missing": False,
        "code": code,
        "alive": alive,
        "refuses": refuses,
        "port": session.server.port,
        "clients": clients,
        "summary": sampler.summary(),
        "resources": sampler.frame().to_parquet(index=False),
        "tree_reasons": sampler.watch.reasons(load_start_perf),
        "log": log.read_bytes() if log.is_file() else b"",
        "noise": readings,
        # the per-request wait is the trial's (merge.noise_rollup), not judged here
        "noise_reasons": noise.noise_reasons(
            {**readings, "noise_runqueue_wait_us_per_request": 0.0}, False
        ),
        "network": {},
        "network_reasons": [],
    }
    if session.network is not None:
        out["network"], out["network_reasons"] = network_row(
            session.network, session.injector, session.probes
        )
    shutil.rmtree(session.workdir, ignore_errors=True)
    return out


def run_shard(token: str, spec_json: str, start_wall_ns: int, cpus: list[int] | None) -> dict:
    """Run one load-generator shard here: `python -m loadgen` starting at start_wall_ns (this
    host's wall clock), wait for it (bounded), and return its log, self-checks and summary;
    its files ({name: size in bytes} in "files") stay here for fetch_chunk."""
    spec = LoadSpec.from_json(spec_json)
    start_perf = perf_at(start_wall_ns)
    lead_ms = (start_perf - time.perf_counter_ns()) / 1e6
    spec = dataclasses.replace(spec, start_at_ns=start_perf)
    out_dir = Path(tempfile.mkdtemp(prefix=f"perfctl-{token}-shard-"))
    kept = False
    try:
        (out_dir / "spec.json").write_text(spec.to_json())
        proc = spawn(
            [sys.executable, "-m", "loadgen", str(out_dir / "spec.json"), str(out_dir)],
            out_dir / "loadgen.log",
            cwd=ROOT,
        )
        with _lock:
            _procs.setdefault(token, []).append(proc)
        watched = set(cpus or spec.cpus or os.sched_getaffinity(0))
        probe = noise.NoiseProbe(watched, loadgen_cpus=watched)  # the host's load generator
        samples = [probe.sample(time.perf_counter_ns(), [], tree_pids(proc.pid))]
        limit = (
            max(0.0, lead_ms / 1e3) + spec.warmup_s + spec.window_s + spec.timeout_s + SHARD_GRACE_S
        )
        deadline = time.monotonic() + limit
        code = None
        while time.monotonic() < deadline:
            try:
                code = proc.wait(SAMPLE_INTERVAL_S)
                break
            except subprocess.TimeoutExpired:
                samples.append(probe.sample(time.perf_counter_ns(), [], tree_pids(proc.pid)))
        samples.append(probe.sample(time.perf_counter_ns(), [], []))
        terminate(proc)
        with _lock:
            left = [p for p in _procs.pop(token, []) if p is not proc]
            if left:
                _procs[token] = left
        result = {
            "code": code,
            "lead_ms": lead_ms,
            "log": tail(out_dir / "loadgen.log", 5),
            "files": None,
            "summary": None,
            "samples": samples,
            "cpus": sorted(watched),
        }
        if code == 0 and (out_dir / "digest.json").is_file():
            result["summary"] = (out_dir / "summary.json").read_text()
            result["files"] = {
                n: (out_dir / n).stat().st_size for n in SHARD_FILES if (out_dir / n).is_file()
            }
            lease = threading.Timer(FILES_LEASE_S, drop_shard, (token,))
            lease.daemon = True
            with _lock:
                _outputs[token] = (out_dir, lease)
            lease.start()
            kept = True
        return result
    finally:
        if not kept:
            shutil.rmtree(out_dir, ignore_errors=True)


def fetch_chunk(token: str, name: str, offset: int) -> bytes:
    """Up to CHUNK_BYTES of the trial's shard file `name` here, from byte `offset` (b"" at
    its end). FileNotFoundError when the files are gone (dropped, or their lease expired)."""
    if name not in SHARD_FILES:
        raise ValueError(f"not a shard file: {name!r}")
    with _lock:
        entry = _outputs.get(token)
    if entry is None:
        raise FileNotFoundError(f"no shard files of trial {token} on this host")
    with open(entry[0] / name, "rb") as f:
        f.seek(offset)
        return f.read(CHUNK_BYTES)


def drop_shard(token: str) -> bool:
    """Remove the trial's shard files here (fetched, or never to be). True if there were."""
    with _lock:
        entry = _outputs.pop(token, None)
    if entry is None:
        return False
    entry[1].cancel()
    shutil.rmtree(entry[0], ignore_errors=True)
    return True


def stop_token(token: str, server: bool = True) -> int:
    """Stop the load generators of one trial still running on this host (the coordinator gave
    up on them: a host was lost, or perfctl is stopping), and with server=True (the trial is
    abandoned) its server and its shard files too. Returns how many processes."""
    with _lock:
        procs = _procs.pop(token, [])
        session = _servers.pop(token, None) if server else None
    for p in procs:
        terminate(p, grace_s=1.0)
    if session is not None:
        _end_server(session)
        shutil.rmtree(session.workdir, ignore_errors=True)
    if server:
        drop_shard(token)
    return len(procs) + (session is not None)
