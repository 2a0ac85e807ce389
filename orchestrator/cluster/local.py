"""`cluster: {local: {hosts: N}}`: a Dask scheduler and one worker per namespace host, on
this machine, started under perfctl's supervisor (proc/process.py): PR_SET_PDEATHSIG, the
guardian and children.json cover them like any server, so kill -9 of perfctl takes them down,
and each worker's own guardian then takes down what its tasks started.

The scheduler listens on the bridge's address in the root namespace; worker hi runs inside
its namespace (`ip netns exec`), listens on hi's address and is named hi. Workers run without
a nanny (the process perfctl supervises is the worker itself) and with the profiler off.

Testing knob, not part of the experiment file: PERFCTL_LOCAL_WORKER_ENV, a JSON object
{host: {NAME: value}}, adds environment variables to that host's worker only (the fault tests
preload libfaketime into one host's worker to step its clock; tests/cluster).

With tls (the default), the cluster speaks mutual TLS only (require_encryption): a CA and
certificates for the scheduler, each worker and the client are made for the run
(certs.write_set) into work_dir/tls, 0700, keys 0600, and removed at stop() (or by the
guardian when perfctl dies).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import PerfctlError
from ..measure import noise
from ..netem.commands import netns_exec
from ..proc.ports import free_port
from ..proc.process import at_death, forget, spawn, tail, terminate
from ..run.bundled import ROOT
from . import certs
from .hosts import LocalHosts

WORKER_THREADS = 4  # a trial's tasks block a thread each: server start, shard, stop
DEATH_TIMEOUT_S = 60  # a worker whose scheduler is gone this long exits by itself
QUIET_WORKER_ENV = {
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",  # no sampling profiler thread
    "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "warning",
}
TLS_ENV = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}
WORKER_ENV_KNOB = "PERFCTL_LOCAL_WORKER_ENV"  # testing: {host: {NAME: value}} (docstring)


def worker_env_knob(names: list[str]) -> dict[str, dict[str, str]]:
    """PERFCTL_LOCAL_WORKER_ENV, read and checked: host -> its worker's extra variables."""
    raw = os.environ.get(WORKER_ENV_KNOB, "")
    if not raw:
        return {}
    try:
        extra = json.loads(raw)
        ok = isinstance(extra, dict) and all(
            h in names
            and isinstance(v, dict)
            and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())
            for h, v in extra.items()
        )
    except ValueError:
        ok = False
    if not ok:
        raise PerfctlError(
            f"environment variable {WORKER_ENV_KNOB} (a testing knob) is not a JSON object "
            f"of local host names ({', '.join(names)}) to objects of string variables: "
            f"{raw[:200]!r}. Fix: unset it, or write e.g. "
            '\'{"h2": {"LD_PRELOAD": "/path/lib.so"}}\'.'
        )
    return extra


def tls_flags(files: certs.TlsFiles) -> list[str]:
    """The `dask scheduler` / `dask worker` flags for one end's TLS files."""
    return [
        "--tls-ca-file",
        str(files.ca),
        "--tls-cert",
        str(files.cert),
        "--tls-key",
        str(files.key),
    ]


class LocalProcesses:
    """start() -> scheduler address; stop() ends the workers, the scheduler and the hosts'
    network. Logs: work_dir/scheduler.log, work_dir/<host>.log."""

    def __init__(self, names: list[str], work_dir: Path, tls: bool = True) -> None:
        self.names = names
        self.work_dir = work_dir
        self.tls_dir: Path | None = work_dir / "tls" if tls else None
        self.tls: dict[str, certs.TlsFiles] = {}  # name (scheduler, client, hN) -> its files
        self._cleanup_key = ""
        self.net: LocalHosts | None = None
        self.scheduler: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.address = ""

    def start(self) -> str:
        extra = worker_env_knob(self.names)  # checked before anything is made
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.net = LocalHosts.create(self.names)
        # one machine: every process of the run is ours to the hosts' noise probes
        env = {**os.environ, **QUIET_WORKER_ENV, noise.RUN_ROOT_ENV: str(os.getpid())}
        flags = {n: [] for n in ["scheduler", *self.names]}
        if self.tls_dir is not None:
            self._cleanup_key = f"cluster-tls-{os.getpid()}-{id(self)}"
            at_death(self._cleanup_key, [["rm", "-rf", str(self.tls_dir)]])
            ips = {h.name: h.ip for h in self.net.hosts} | {"scheduler": self.net.bridge_ip}
            self.tls = certs.write_set(self.tls_dir, self.names, ips)
            flags = {n: tls_flags(self.tls[n]) for n in flags}
            env |= TLS_ENV
        port = free_port(self.net.bridge_ip)
        scheme = "tls" if self.tls_dir is not None else "tcp"
        self.address = f"{scheme}://{self.net.bridge_ip}:{port}"
        self.scheduler = spawn(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                self.net.bridge_ip,
                "--port",
                str(port),
                "--protocol",
                scheme,
                "--no-dashboard",
                *flags["scheduler"],
            ],
            self.work_dir / "scheduler.log",
            cwd=ROOT,
            env=env,
        )
        for h in self.net.hosts:
            argv = [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                self.address,
                "--name",
                h.name,
                "--host",
                h.ip,
                "--nthreads",
                str(WORKER_THREADS),
                "--no-nanny",
                "--no-dashboard",
                "--memory-limit",
                "0",
                "--death-timeout",
                str(DEATH_TIMEOUT_S),
                "--local-directory",
                str(self.work_dir / h.name),
                *flags[h.name],
            ]
            self.workers[h.name] = spawn(
                netns_exec(h.netns, argv),
                self.work_dir / f"{h.name}.log",
                cwd=ROOT,
                env={**env, **extra.get(h.name, {})},
            )
        return self.address

    def ips(self) -> dict[str, str]:
        return {h.name: h.ip for h in self.net.hosts} if self.net else {}

    def log_tail(self, name: str) -> str:
        return tail(self.work_dir / f"{name}.log", 1)

    def logs(self) -> str:
        """The last lines of every log, for a message when the cluster did not come up."""
        parts = [f"scheduler: {tail(self.work_dir / 'scheduler.log', 5)}"]
        parts += [f"{n}: {tail(self.work_dir / f'{n}.log', 5)}" for n in self.names]
        return "\n".join(parts)

    def stop(self) -> None:
        for proc in self.workers.values():
            terminate(proc, grace_s=2.0)
        if self.scheduler is not None:
            terminate(self.scheduler, grace_s=2.0)
        if self.net is not None:
            self.net.delete()
        if self.tls_dir is not None:
            shutil.rmtree(self.tls_dir, ignore_errors=True)
        if self._cleanup_key:
            forget(self._cleanup_key)
            self._cleanup_key = ""
