"""One server for one trial: launch (bundled or command), wait until ready, stop."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.catalogue import RMI_MODELS
from ..experiment.servers import BundledServer, CommandServer, ServerConfig
from ..experiment.services import fill
from ..proc.ports import free_port, port_taken
from ..proc.process import at_death, forget, redacted, spawn, tail, terminate
from . import bundled
from .certs import RunCertificate
from .postgres import split_password

READY_POLL_S = 0.05
ACCEPT_CHECK_TIMEOUT_S = 2.0


def stopped_accepting(host: str, port: int) -> bool:
    """True when nothing accepts on host:port any more (a refused connect; a slow or full
    backlog is not proof, so a timeout is not counted)."""
    try:
        with socket.create_connection((host, port), timeout=ACCEPT_CHECK_TIMEOUT_S):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


class ServerProcess:
    """One running server for one trial: start() -> wait_ready() -> stop()."""

    def __init__(
        self,
        name: str,
        config: ServerConfig,
        workdir: Path,
        cpus: list[int] | None,
        source: str = "experiment",
        host: str = "127.0.0.1",
        wrap=None,
        services: dict[str, dict[str, str]] | None = None,
        tls: RunCertificate | None = None,
    ) -> None:
        """host: the address to listen on; wrap: argv -> argv (e.g. run in a namespace);
        services: the running services' endpoints, for `{services.NAME.FIELD}`; tls: the
        certificate an HTTPS server (`tls: true`) serves."""
        self.name = name
        self.config = config
        self.workdir = workdir
        self.cpus = cpus
        self.source = source
        self.host = host
        self.wrap = wrap or (lambda argv: argv)
        self.port = 0
        self.log_path = workdir / "server.log"
        self.proc: subprocess.Popen | None = None
        self.argv: list[str] = []
        self.services = services or {}
        # the services' passwords (messages and records hide them: run/postgres.py)
        self.secrets = {v["password"] for v in self.services.values() if v.get("password")}
        self.tls = tls
        self.scratch: Path | None = None  # the server's temporary directory (`_make_scratch`)

    def _make_scratch(self) -> dict:
        """A temporary directory for this server alone, as TMPDIR (and java.io.tmpdir for the
        bundled JVMs, whose Tomcat and Spring Boot leave a work directory per start in /tmp:
        789 of them in one day of tests before this). Removed by stop(), and by the guardian
        if perfctl is killed first."""
        self.scratch = Path(tempfile.mkdtemp(prefix="perfctl-server-tmp-"))
        at_death(self._scratch_key(), [["rm", "-rf", str(self.scratch)]])
        return {"TMPDIR": str(self.scratch)}

    def _scratch_key(self) -> str:
        return f"tmp-{self.scratch.name}" if self.scratch else ""

    def _remove_scratch(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            forget(self._scratch_key())
            self.scratch = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.config
        if isinstance(config, CommandServer) and config.port is not None:
            if port_taken(config.port):
                raise PerfctlError(
                    f"{self.source}: key `servers.{self.name}.port`: port {config.port} is already "
                    "taken by another process. Fix: stop that process, or remove `port:` so "
                    "perfctl picks a free port."
                )
            self.port = config.port
        else:
            self.port = free_port(self.host) if self.host.startswith("127.") else free_port()
        env = None
        if len(self.secrets) == 1:  # one service: its password where libpq looks (PGPASSWORD)
            env = {**os.environ, "PGPASSWORD": next(iter(self.secrets))}
        if isinstance(config, BundledServer):
            dsn, password = (
                split_password(fill(config.db, self.services)) if config.db else ("", None)
            )
            if password:  # out of argv (which any local user may read): libpq and Db.java read it
                env = {**os.environ, "PGPASSWORD": password}
            bundled.build(
                config.impl, config.variant, config.concurrency_model, db=config.db is not None
            )
            self.argv = bundled.command(
                config.impl,
                config.concurrency_model,
                self.port,
                config.threads,
                config.backlog,
                config.buckets,
                config.layout,
                variant=config.variant,
                host=self.host,
                db=dsn or None,
                db_pool=config.db_pool,
            )
            if self.tls is not None:
                self.argv += ["--tls-cert", str(self.tls.cert_file)]
                self.argv += ["--tls-key", str(self.tls.key_file)]
        else:
            root = self.workdir.resolve()
            for rel, content in config.files.items():
                f = (root / rel).resolve()
                if not f.is_relative_to(root):  # validated already; a symlink could still lead out
                    raise PerfctlError(
                        f"{self.source}: key `servers.{self.name}.files`: {rel!r} "
                        f"leads outside {{workdir}} ({f}). Fix: name a file inside it."
                    )
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(fill(self._placeholders(content), self.services))
            self.argv = shlex.split(fill(self._placeholders(config.cmd), self.services))
        if self.tls is not None:
            env = dict(
                env or os.environ,
                PERFCTL_TLS_CERT=str(self.tls.cert_file),
                PERFCTL_TLS_KEY=str(self.tls.key_file),
            )
        env = dict(env or os.environ, **self._make_scratch())
        argv = list(self.argv)
        if isinstance(config, BundledServer) and config.impl == "java":
            argv.insert(1, f"-Djava.io.tmpdir={self.scratch}")
        try:
            self.proc = spawn(self.wrap(argv), self.log_path, self.cpus, cwd=self.workdir, env=env)
        except BaseException:
            self._remove_scratch()
            raise

    @property
    def shown_argv(self) -> str:
        """The command line as messages and records show it: service passwords as ***."""
        return redacted(shlex.join(self.argv))

    def _placeholders(self, text: str) -> str:
        """text with {port}, {workdir}, {host} and, for an HTTPS server, {cert} and {key}."""
        text = (
            text.replace("{port}", str(self.port))
            .replace("{workdir}", str(self.workdir))
            .replace("{host}", self.host)
        )
        if self.tls is not None:
            text = text.replace("{cert}", str(self.tls.cert_file))
            text = text.replace("{key}", str(self.tls.key_file))
        return text

    def wait_ready(self) -> float:
        """Block until the server answers; returns seconds taken. Raises PerfctlError when it
        exits during start-up or does not answer in time (with its last 20 log lines)."""
        config = self.config
        timeout = (
            config.startup_timeout_s
            if isinstance(config, BundledServer)
            else config.ready.timeout_s
        )
        if isinstance(config, BundledServer):  # RMI servers are ready when they accept
            path = None if config.concurrency_model in RMI_MODELS else "/health"
        else:
            path = config.ready.http
        t0 = time.monotonic()
        while True:
            code = self.proc.poll()
            if code is not None:
                raise PerfctlError(
                    f"{self.source}: key `servers.{self.name}`: the server exited with status "
                    f"{code} during start-up ({self.shown_argv}). Its last lines:\n"
                    f"{tail(self.log_path)}\nFix: check the server's options and that it can run "
                    "by hand (perfctl serve ... for bundled servers)."
                )
            if self._answers(path):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                self.stop()
                raise PerfctlError(
                    f"{self.source}: key `servers.{self.name}`: the server did not become ready "
                    f"within {timeout:.0f} s ({'GET ' + path if path else 'TCP connect'} on port "
                    f"{self.port}). Its last lines:\n{tail(self.log_path)}\nFix: make it listen on "
                    "{port}, or raise ready.timeout / startup_timeout."
                )
            time.sleep(READY_POLL_S)

    def _answers(self, path: str | None) -> bool:
        if path is None:
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return True
            except OSError:
                return False
        scheme, context = "http", None
        if self.tls is not None:
            scheme = "https"
            context = ssl.create_default_context(cafile=str(self.tls.ca_file))
        url = f"{scheme}://{self.host}:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=1.0, context=context) as r:
                return r.status < 500
        except urllib.error.HTTPError as e:
            return e.code < 500
        except urllib.error.URLError as e:
            # an HTTPS server that answers but fails the handshake is up: the probe before
            # the load (trial.py) says what is wrong with it
            return isinstance(e.reason, ssl.SSLError)
        except (OSError, ValueError):
            return False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def serving(self) -> tuple[bool, bool]:
        """(alive, refuses) at the load's end: the server's process still runs, and, when it
        does, nothing accepts on its port any more (a server that stopped serving but lives on
        behind a wrapper)."""
        alive = self.proc is not None and self.proc.poll() is None
        return alive, alive and stopped_accepting(self.host, self.port)

    def stop(self) -> int | None:
        if self.proc is None:
            self._remove_scratch()
            return None
        code = terminate(self.proc)
        self.proc = None
        self._remove_scratch()
        return code
