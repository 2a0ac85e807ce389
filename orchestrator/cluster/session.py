"""The coordinator's side of a cluster: the Dask client, the hosts (workers by name), their
clocks and whether they are still there.

Clock offsets, NTP-style: the coordinator reads its wall clock (t0), asks the host for its own
(th) and reads its clock again (t1). The host read th somewhere inside [t0, t1], so its offset
is th - (t0 + t1) / 2, known to +-(t1 - t0) / 2 (RTT/2). Of CLOCK_SAMPLES exchanges the one
with the smallest RTT is kept. The exchange goes coordinator -> scheduler -> worker and back,
so the bound is conservative.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import distributed
from distributed.security import Security

from ..errors import PerfctlError, RunStopped
from ..experiment.cluster import Cluster
from ..experiment.plan import Plan
from . import tasks
from .certs import TlsFiles
from .local import LocalProcesses

CLOCK_SAMPLES = 8
POLL_S = 0.2
LOCAL_START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0
FETCH_CHUNK_TIMEOUT_S = 60.0  # one chunk of a shard's files (tasks.CHUNK_BYTES)


@dataclass(frozen=True)
class Clock:
    """One host's clock against the coordinator's: host = coordinator + offset_ns, within
    +-uncertainty_ns."""

    offset_ns: int
    uncertainty_ns: int

    def as_dict(self) -> dict:
        return {"offset_ms": self.offset_ns / 1e6, "uncertainty_ms": self.uncertainty_ns / 1e6}


class HostLost(Exception):
    """A host left the cluster while a trial needed it."""

    def __init__(self, hosts: list[str], detail: str = "") -> None:
        super().__init__(", ".join(hosts) + (f" ({detail})" if detail else ""))
        self.hosts = hosts
        self.detail = detail


class SchedulerLost(RunStopped):
    """The scheduler stopped answering (killed, its host or link down): the run stops. `why`:
    what was seen (the scheduler's exit status, or the error talking to it)."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


class Session:
    """open() connects (starting a local cluster first when asked); close() ends it."""

    def __init__(self, cfg: Cluster, source: str, work_dir: Path) -> None:
        self.cfg = cfg
        self.source = source
        self.work_dir = work_dir
        self.local: LocalProcesses | None = None
        self.client: distributed.Client | None = None
        self.address = cfg.scheduler or ""
        self.facts: dict[str, dict] = {}
        self.security: Security | None = None  # the client's TLS (None: plain TCP)
        self.lost = False  # the scheduler stopped answering (SchedulerLost)

    # --- connecting --------------------------------------------------------------------
    def open(self) -> Session:
        try:
            if self.cfg.local is not None:
                self._open_local()
            else:
                if self.cfg.tls is not None:
                    self.security = security(self._tls_files())
                self.client = self._connect(self.address, self.cfg.connect_timeout_s)
            if not self.names():
                raise PerfctlError(
                    f"{self.source}: key `cluster.scheduler`: the Dask scheduler at "
                    f"{self.address} has no workers. Fix: start one per host with "
                    f"`dask worker {self.address} --name h1` (docs/clusters.md)."
                )
            facts = self.client.run(tasks.host_facts)
            self.facts = {n: facts[a] for n, a in self.addresses().items() if a in facts}
        except BaseException:
            self.close()
            raise
        return self

    def _tls_files(self) -> TlsFiles:
        """cluster.tls's files, relative to the experiment file; PerfctlError when one is
        missing or the key is readable by others."""
        base = Path(self.source).resolve().parent
        tls = self.cfg.tls
        files = TlsFiles(*(p if p.is_absolute() else base / p for p in (tls.ca, tls.cert, tls.key)))
        for key, path in zip(("ca", "cert", "key"), (files.ca, files.cert, files.key)):
            if not path.is_file():
                raise PerfctlError(
                    f"{self.source}: key `cluster.tls.{key}`: {path} is not a readable file. "
                    "Fix: make the cluster's certificates with `perfctl cluster certs DIR "
                    "--hosts h1,h2,...` and name DIR's ca.pem, client.pem and client-key.pem."
                )
        if files.key.stat().st_mode & 0o077:
            raise PerfctlError(
                f"{self.source}: key `cluster.tls.key`: {files.key} can be read by other "
                f"users, and whoever holds it may run code on every host. Fix: chmod 600 "
                f"{files.key}."
            )
        return files

    def _connect(self, address: str, timeout_s: float) -> distributed.Client:
        try:
            return distributed.Client(
                address, timeout=timeout_s, set_as_default=False, security=self.security
            )
        except (OSError, TimeoutError) as e:
            tls = (
                ", and that the scheduler's certificate is signed by the CA of cluster.tls.ca"
                if self.security is not None
                else ""
            )
            raise PerfctlError(
                f"{self.source}: key `cluster.scheduler`: cannot reach the Dask scheduler at "
                f"{address} within {timeout_s:g} s ({type(e).__name__}: {e}). Fix: start it "
                f"(`dask scheduler` on that host), check the address and that its port is open "
                f"to this machine{tls}, or raise cluster.connect_timeout."
            ) from None

    def _open_local(self) -> None:
        self.local = LocalProcesses(self.cfg.local.host_names, self.work_dir, self.cfg.uses_tls)
        self.address = self.local.start()
        if self.local.tls:
            self.security = security(self.local.tls["client"])
        self.client = self._connect(self.address, LOCAL_START_TIMEOUT_S)
        n = self.cfg.local.hosts
        try:
            self.client.wait_for_workers(n, timeout=LOCAL_START_TIMEOUT_S)
        except (TimeoutError, OSError):
            raise PerfctlError(
                f"{self.source}: key `cluster.local`: the local cluster's {n} workers did not "
                f"all join within {LOCAL_START_TIMEOUT_S:g} s. Their last lines:\n"
                f"{self.local.logs()}\nFix: check that `python -m distributed.cli.dask_worker` "
                "runs here (pip install -e .)."
            ) from None

    def close(self) -> None:
        if self.client is not None and self.lost:
            # the client is still trying to reconnect: closing it cancels that, which Dask
            # logs as an error with a traceback; the paragraph has said what happened
            logging.getLogger("distributed.client").setLevel(logging.CRITICAL)
        if self.client is not None:
            try:
                self.client.close(timeout=STOP_TIMEOUT_S)
            except Exception:  # a scheduler already gone: nothing to close politely
                pass
            self.client = None
        if self.local is not None:
            self.local.stop()
            self.local = None

    # --- hosts -------------------------------------------------------------------------
    def addresses(self) -> dict[str, str]:
        """Worker name -> address, for the workers the scheduler knows right now."""
        # Asked directly: Client.scheduler_info() returns a cache that the client's own
        # periodic refresh overwrites with a worker-less summary, so it can read as empty.
        if self.local is not None and self.local.scheduler.poll() is not None:
            raise self._scheduler_lost(f"the scheduler exited {self.local.scheduler.returncode}")
        try:
            info = self.client.sync(self.client.scheduler.identity, n_workers=-1)
        except (OSError, TimeoutError) as e:  # CommClosedError is an OSError
            raise self._scheduler_lost(f"{type(e).__name__}: {e}") from None
        return {str(w.get("name", a)): a for a, w in info.get("workers", {}).items()}

    def _scheduler_lost(self, why: str) -> SchedulerLost:
        self.lost = True
        start = (
            "the local cluster starts afresh"
            if self.local is not None
            else f"restart `dask scheduler` at {self.address} and its workers"
        )
        return SchedulerLost(
            f"cluster at {self.address}: the Dask scheduler stopped answering ({why}). The run "
            "stops; every finished trial is kept in trials.csv, the trial that was running is "
            "recorded as invalid (the Dask scheduler died during the trial), and what it "
            "started on the hosts stops when its lease ends (cluster/tasks.py). Fix: "
            f"{start}, then perfctl run --resume RUN_DIR runs the rest.",
            why,
        )

    def names(self) -> list[str]:
        return sorted(self.addresses())

    def why_gone(self, lost: list[str], now: dict[str, str]) -> str:
        """What is known about hosts that left: for a local cluster, the worker's exit status
        and last log line; else which hosts the scheduler still has."""
        if self.local is None:
            return f"hosts there now: {', '.join(sorted(now)) or 'none'}"
        parts = []
        for h in lost:
            proc = self.local.workers.get(h)
            code = proc.poll() if proc is not None else None
            state = "running" if code is None else f"exited {code}"
            parts.append(f"worker {h} {state}, last log line: {self.local.log_tail(h)}")
        return "; ".join(parts)

    def check_placement(self, plan: Plan) -> None:
        """Every host a cell names is a worker of the cluster; its CPUs exist there."""
        known = self.names()
        for cell in plan.cells:
            p = cell.placement
            server = p.server_host(known)
            for key, hosts in (
                ("placement.server.host", [server]),
                ("placement.loadgen.hosts", p.loadgen_hosts(known)),
            ):
                for h in hosts:
                    if h not in known:
                        raise PerfctlError(
                            f"{self.source}: key `{key}`: host {h!r} (cell {cell.label}) is "
                            f"not a worker of the cluster at {self.address}; known hosts: "
                            f"{', '.join(known)}. Fix: name one of those, or start "
                            f"`dask worker {self.address} --name {h}` on that machine."
                        )
            for key, cpus, hosts in (
                ("placement.server.cpus", p.server.cpus if p.server else None, [server]),
                (
                    "placement.loadgen.cpus",
                    p.loadgen.cpus if p.loadgen else None,
                    p.loadgen_hosts(known),
                ),
            ):
                for h in hosts:
                    have = self.facts.get(h, {}).get("cpus", [])
                    bad = [c for c in cpus or [] if c not in have]
                    if bad:
                        raise PerfctlError(
                            f"{self.source}: key `{key}`: CPU(s) {bad} do not exist on host "
                            f"{h} (its usable CPUs: {have}). Fix: name CPUs of that host."
                        )

    def require(self, hosts: list[str]) -> dict[str, str]:
        """The addresses of `hosts`, waiting up to cluster.host_return for missing ones;
        PerfctlError when one stays gone."""
        deadline = time.monotonic() + self.cfg.host_return_s
        while True:
            addrs = self.addresses()
            missing = [h for h in hosts if h not in addrs]
            if not missing:
                return {h: addrs[h] for h in hosts}
            if time.monotonic() >= deadline:
                raise PerfctlError(
                    f"cluster at {self.address}: host(s) {', '.join(missing)} left the "
                    f"cluster and did not come back within {self.cfg.host_return_s:g} s "
                    f"(hosts there now: {', '.join(sorted(addrs)) or 'none'}). The run "
                    "stops; every finished trial is kept in trials.csv. Fix: restart "
                    f"`dask worker {self.address} --name {missing[0]}` there (a local "
                    "cluster starts afresh), then perfctl run --resume RUN_DIR."
                )
            time.sleep(POLL_S)

    def clock(self, name: str, address: str) -> Clock:
        """Host `name`'s clock offset (module docstring); HostLost when it cannot answer."""
        best = None
        for _ in range(CLOCK_SAMPLES):
            t0 = time.time_ns()
            try:
                th = self.client.run(tasks.clock_now, workers=[address])[address]
            except Exception:  # whatever the comm raises, the host did not answer
                raise HostLost([name]) from None
            t1 = time.time_ns()
            if best is None or t1 - t0 < best[1] - best[0]:
                best = (t0, t1, th)
        t0, t1, th = best
        return Clock(offset_ns=th - (t0 + t1) // 2, uncertainty_ns=(t1 - t0 + 1) // 2)

    # --- tasks -------------------------------------------------------------------------
    def submit(self, address: str, fn, *args) -> distributed.Future:
        """fn(*args) as a task on that host's worker only (never moved elsewhere)."""
        return self.client.submit(
            fn, *args, workers=[address], allow_other_workers=False, pure=False
        )

    def wait(
        self, futures: dict[str, distributed.Future], hosts: dict[str, str], timeout_s: float
    ) -> dict:
        """Wait for every future. Returns name -> its result, or the exception its task
        raised (as a value: the caller decides what a failed task means). Raises HostLost
        naming every host in `hosts` (name -> address) that left meanwhile, and
        TimeoutError after timeout_s; either way the futures still pending are cancelled."""
        deadline = time.monotonic() + timeout_s
        pending = list(futures.values())
        while True:
            _, pending = _wait_some(pending, POLL_S)
            if not pending:
                return {name: outcome(f) for name, f in futures.items()}
            now = self.addresses()
            lost = sorted(h for h, a in hosts.items() if now.get(h) != a)
            if lost:
                self.client.cancel(pending)
                raise HostLost(lost, self.why_gone(lost, now))
            if time.monotonic() >= deadline:
                self.client.cancel(pending)
                raise TimeoutError

    def fetch_files(
        self, name: str, address: str, token: str, files: dict[str, int], dest: Path
    ) -> None:
        """Copy a shard's files ({name: size}, tasks.run_shard) from host `name` into dest,
        one chunk (tasks.CHUNK_BYTES) per task, each written before the next is asked for,
        then remove them there. Raises HostLost when the host leaves, OSError when a file
        comes back short or the host cannot read it."""
        dest.mkdir(parents=True, exist_ok=True)
        for fname, size in files.items():
            tmp = dest / f"{fname}.part"
            with open(tmp, "wb") as out:
                while out.tell() < size:
                    got = self.wait(
                        {name: self.submit(address, tasks.fetch_chunk, token, fname, out.tell())},
                        {name: address},
                        FETCH_CHUNK_TIMEOUT_S,
                    )[name]
                    if isinstance(got, BaseException):
                        raise OSError(f"{type(got).__name__}: {got}")
                    if not got:
                        raise OSError(f"{fname} ended at byte {out.tell()} of {size}")
                    out.write(got)
            tmp.replace(dest / fname)
        self.wait(
            {name: self.submit(address, tasks.drop_shard, token)},
            {name: address},
            FETCH_CHUNK_TIMEOUT_S,
        )

    def stop_trial(self, token: str, hosts: dict[str, str], server: bool) -> None:
        """Best effort: stop the load generators a trial still runs on those hosts, and with
        server=True its server too (bounded in time)."""
        try:
            alive = set(self.addresses().values())
        except SchedulerLost:  # nothing to ask: the workers stop what they run without it
            return
        targets = [a for a in hosts.values() if a in alive]
        if not targets:
            return
        fut = [
            self.client.submit(
                tasks.stop_token,
                token,
                server,
                workers=[a],
                allow_other_workers=False,
                pure=False,
                priority=100,
            )
            for a in targets
        ]
        _wait_some(fut, STOP_TIMEOUT_S)
        self.client.cancel(fut)

    def info(self) -> dict:
        """run.json's `cluster`: scheduler, hosts, their addresses and CPUs."""
        addrs = self.addresses()
        return {
            "scheduler": self.address,
            "mode": "local" if self.local else "scheduler",
            "tls": self.security is not None,
            "warning": self.cfg.warning,
            "hosts": {
                n: {"address": addrs.get(n, ""), **self.facts.get(n, {})}
                for n in sorted(self.facts)
            },
        }


def security(files: TlsFiles) -> Security:
    """The client's side of mutual TLS: its certificate, the CA it trusts, nothing in clear."""
    return Security(
        tls_ca_file=str(files.ca),
        tls_client_cert=str(files.cert),
        tls_client_key=str(files.key),
        require_encryption=True,
    )


def outcome(future: distributed.Future):
    """A finished future's result, or the exception its task raised."""
    if future.status == "finished":
        return future.result()
    exc = future.exception()
    return exc if isinstance(exc, BaseException) else RuntimeError(f"task {future.status}")


def _wait_some(futures, timeout_s: float):
    """(done, not done) once all are done or after at most timeout_s. Polls the futures'
    state, which the client keeps up to date (distributed.wait would need a default client)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pending = [f for f in futures if not f.done()]
        if not pending or time.monotonic() >= deadline:
            return [f for f in futures if f.done()], pending
        time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))
