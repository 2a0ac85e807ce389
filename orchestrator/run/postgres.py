"""One `postgresql` service at run time (PostgresRunner): a PostgreSQL server of its own,
started before the trials of its scope and stopped, with its data directory removed, after them.

How one `postgresql` service runs:
- `initdb` into DIR/services/NAME/data, DIR being the run directory (`scope: run`) or the
  trial's directory (`scope: trial`); user `perfctl` with a random password made for this
  service (secrets.token_urlsafe), scram-sha-256 authentication, no fsync at initdb. pg_hba.conf
  then lets in user `perfctl` alone, over the Unix socket and from loopback (127.0.0.1/32,
  ::1/128), always with the password. The password reaches initdb through a 0600 file removed
  right after, and psql through PGPASSWORD: it is never an argument, and never written to the
  run directory.
- `postgres -D data -p PORT -k SOCKDIR` on a free loopback port, with its Unix socket in a short
  0700 directory of its own under /tmp (socket paths are limited to 107 bytes). The postmaster runs
  in the foreground under perfctl's supervisor (process.py) rather than detached by
  `pg_ctl start`: `pg_ctl` puts it in a session of its own and exits, which would leave it
  outside the process group and the parent-death signal that end every other process perfctl
  starts. Stopping is what `pg_ctl stop -m fast` does: SIGINT to the postmaster, then the
  group is ended.
- When perfctl runs as root, initdb and postgres (which refuse to run as root) run as an
  unprivileged user: $PERFCTL_PG_USER, default `nobody`. The data directory is then owned by
  that user; if the run directory is not reachable by it (a parent without o+x, such as /root),
  the data directory goes to a fresh directory under /tmp instead, and services/NAME.json says
  where.
- Ready: `psql -c 'select 1'` over TCP succeeds. Then database `perfctl` is created and loaded
  with servers/db/schema.sql (participants rows: `data.participants`).
- If perfctl dies (even by kill -9), the guardian kills the postmaster and its backends (they
  carry perfctl's mark) and runs `rm -rf` on the data and socket directories (process.at_death);
  if the guardian died too, the next `perfctl run` stops them and runs the same removal
  (leftovers.py).

Endpoints, filled into `{services.NAME.FIELD}` when a server starts: `dsn`
(postgresql://perfctl:PASSWORD@127.0.0.1:PORT/perfctl), `host`, `port`, `user`, `password`.
Whatever shows or records a filled command line shows *** for the password
(process.hide, process.redacted).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.services import PostgresService
from ..proc.ports import free_port
from ..proc.process import at_death, forget, hide, run_to_end, spawn, tail, terminate
from .bundled import SERVERS_DIR

SCHEMA = SERVERS_DIR / "db" / "schema.sql"


DB_USER = "perfctl"


DB_NAME = "perfctl"


HOST = "127.0.0.1"


READY_POLL_S = 0.1


STOP_GRACE_S = 10.0


INITDB_TIMEOUT_S = 120.0


PSQL_TIMEOUT_S = 300.0


PASSWORD_BYTES = 24  # token_urlsafe: 32 URL-safe characters, nothing to escape in a URI


_URI_PASSWORD = re.compile(r"^(postgres(?:ql)?://[^:@/]*):[^@/]*@")


PG_HBA = """\
# perfctl: user perfctl only, with its password (scram-sha-256), over the socket and loopback
local all {user} scram-sha-256
host  all {user} 127.0.0.1/32 scram-sha-256
host  all {user} ::1/128 scram-sha-256
"""


def new_password() -> str:
    """A fresh random password for one service (URL-safe: a DSN carries it as written)."""
    return secrets.token_urlsafe(PASSWORD_BYTES)


def split_password(dsn: str) -> tuple[str, str | None]:
    """(the DSN without its password, the password or None): postgresql://u:pw@h/d ->
    (postgresql://u@h/d, pw). A server then reads the password from PGPASSWORD, out of argv."""
    m = _URI_PASSWORD.match(dsn)
    if m is None:
        return dsn, None
    return m.group(1) + "@" + dsn[m.end() :], dsn[len(m.group(1)) + 1 : m.end() - 1]


def find_pg_bin() -> Path | None:
    """The directory of PostgreSQL's server programs (initdb, postgres, psql): $PERFCTL_PG_BIN,
    else the newest /usr/lib/postgresql/*/bin, else wherever initdb is on PATH."""
    env = os.environ.get("PERFCTL_PG_BIN")
    candidates = [Path(env)] if env else []
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates += versions
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for c in candidates:
        if (c / "initdb").is_file() and (c / "postgres").is_file():
            return c
    return None


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) to run PostgreSQL as, or None to run it as this process's user."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("PERFCTL_PG_USER", "nobody")
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise PerfctlError(
            f"PostgreSQL refuses to run as root and user {name!r} (from "
            "$PERFCTL_PG_USER, default nobody) does not exist. Fix: set "
            "PERFCTL_PG_USER to an unprivileged user of this machine."
        ) from None
    return pw.pw_uid, pw.pw_gid


def _listening(host: str, port: int) -> bool:
    """Whether something accepts connections on host:port (a port whose closed connections
    linger in TIME_WAIT is free to postgres, which binds with SO_REUSEADDR)."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _reachable_by_others(path: Path) -> bool:
    """Whether every directory above path lets any user pass (o+x)."""
    for parent in path.resolve().parents:
        try:
            if not parent.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def accepts_login(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """Whether PostgreSQL at host:port has started taking logins: a protocol-3 StartupMessage for
    user perfctl answered with an authentication request ('R': the password exchange it asks
    for, scram-sha-256 here). While it starts up it answers 'E' instead. The password is not
    sent: this says the server is up, not who may enter."""
    params = f"user\0{DB_USER}\0database\0postgres\0\0".encode()
    msg = struct.pack("!ii", 8 + len(params), 196608) + params
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(msg)
            head = s.recv(9)
            if head[:1] == b"R":
                s.sendall(b"X\0\0\0\4")  # Terminate: a clean goodbye, no log noise
    except OSError:
        return False
    return len(head) >= 9 and head[:1] == b"R"


class PostgresRunner:
    """One running PostgreSQL service: start(base_dir) -> endpoints -> stop()."""

    def __init__(self, name: str, config: PostgresService, source: str) -> None:
        self.name, self.config, self.source = name, config, source
        self.key = f"services.{name}"
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.data_dir: Path | None = None
        self.sock_dir: Path | None = None
        self.log_path: Path | None = None
        self._fallback: Path | None = None  # a /tmp directory when the run dir is unreachable
        self._cleanup_key = ""
        self.password = new_password()  # in memory only: see the module docstring
        hide(self.password)

    @property
    def endpoints(self) -> dict[str, str]:
        return {
            "dsn": f"postgresql://{DB_USER}:{self.password}@{HOST}:{self.port}/{DB_NAME}",
            "host": HOST,
            "port": str(self.port),
            "user": DB_USER,
            "password": self.password,
        }

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _fail(self, what: str, log: Path, fix: str) -> PerfctlError:
        return PerfctlError(
            f"{self.source}: key `{self.key}`: {what}. Its last lines "
            f"({log}):\n{tail(log)}\nFix: {fix}"
        )

    def start(self, base_dir: Path) -> None:
        """initdb, start, wait until it accepts connections, load the schema and data.
        PerfctlError with the log's last lines when a step fails (everything is removed)."""
        try:
            self._start(base_dir)
        except BaseException:
            self.stop()
            raise

    def _start(self, base_dir: Path) -> None:
        bindir = find_pg_bin()
        if bindir is None:
            raise PerfctlError(
                f"{self.source}: key `{self.key}`: PostgreSQL's server programs "
                "(initdb, postgres) are not installed. Fix: apt-get install "
                "postgresql (make setup does), or set PERFCTL_PG_BIN to their "
                "directory."
            )
        user = _run_as()
        home = base_dir / "services"
        home.mkdir(parents=True, exist_ok=True)
        self.log_path = home / f"{self.name}.log"
        where = home / self.name
        if user is not None and not _reachable_by_others(home):
            where = self._fallback = Path(tempfile.mkdtemp(prefix=f"perfctl-{self.name}-"))
        self.data_dir = where / "data"
        self.sock_dir = Path(tempfile.mkdtemp(prefix="perfctl-pg-"))
        self._cleanup_key = f"pg-{os.getpid()}-{self.sock_dir.name}"
        at_death(
            self._cleanup_key,
            [["rm", "-rf", str(self._fallback or self.data_dir), str(self.sock_dir)]],
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        os.chmod(self.sock_dir, 0o700)  # only postgres's user (and root) reach the socket
        pwfile = self.sock_dir / "pwfile"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.password + "\n")
        if user is not None:
            for d in (where, self.data_dir, self.sock_dir, pwfile):
                os.chown(d, *user)
        (home / f"{self.name}.json").write_text(
            json.dumps(
                {
                    "kind": "postgresql",
                    "data_dir": str(self.data_dir),
                    "socket_dir": str(self.sock_dir),
                    "bin": str(bindir),
                    "user": pwd.getpwuid(user[0]).pw_name if user else None,
                },
                indent=1,
            )
        )
        env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PGTZ": "UTC", "TZ": "UTC"}
        code = run_to_end(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                DB_USER,
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            self.log_path,
            INITDB_TIMEOUT_S,
            cwd=self.sock_dir,
            env=env,
            user=user,
        )
        pwfile.unlink(missing_ok=True)
        if code != 0:
            raise self._fail(
                f"initdb failed ({'timed out' if code is None else f'exit {code}'})",
                self.log_path,
                "check that the PostgreSQL packages are complete "
                "and the run directory's disk has room",
            )
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text(PG_HBA.format(user=DB_USER))
        if user is not None:
            os.chown(hba, *user)
        if self.config.port is not None:
            if _listening(HOST, self.config.port):
                raise PerfctlError(
                    f"{self.source}: key `{self.key}.port`: port "
                    f"{self.config.port} is already taken by another process. Fix: "
                    "stop that process, or remove `port:` so perfctl picks a free "
                    "port."
                )
            self.port = self.config.port
        else:
            self.port = free_port(HOST)
        argv = [
            str(bindir / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-k",
            str(self.sock_dir),
            "-c",
            f"listen_addresses={HOST}",
            "-c",
            f"max_connections={self.config.max_connections}",
        ]
        for k, v in self.config.settings.items():
            argv += ["-c", f"{k}={v}"]
        self.proc = spawn(argv, self.log_path, cwd=self.sock_dir, env=env, user=user)
        self._wait_ready()
        psql = [
            str(bindir / "psql"),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            HOST,
            "-p",
            str(self.port),
            "-U",
            DB_USER,
            "-w",  # never prompt: the password comes from PGPASSWORD
        ]
        env = {**env, "PGPASSWORD": self.password}
        code = run_to_end(
            psql + ["-d", "postgres", "-c", f"CREATE DATABASE {DB_NAME}"],
            self.log_path,
            PSQL_TIMEOUT_S,
            cwd=self.sock_dir,
            env=env,
        )
        if code == 0:
            code = run_to_end(
                psql
                + [
                    "-d",
                    DB_NAME,
                    "-v",
                    f"participants={self.config.data.participants}",
                    "-f",
                    str(SCHEMA),
                ],
                self.log_path,
                PSQL_TIMEOUT_S,
                cwd=self.sock_dir,
                env=env,
            )
        if code != 0:
            raise self._fail(
                "loading the schema and data (servers/db/schema.sql) failed",
                self.log_path,
                "see the log; a smaller data.participants loads faster",
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise self._fail(
                    f"postgres exited with status {code} during start-up",
                    self.log_path,
                    "see the log (a taken port or too little shared memory are the usual causes)",
                )
            if accepts_login(HOST, self.port):
                return
            if time.monotonic() > deadline:
                raise self._fail(
                    f"postgres did not accept connections within "
                    f"{self.config.startup_timeout_s:.0f} s on port {self.port}",
                    self.log_path,
                    "raise startup_timeout, or see the log",
                )
            time.sleep(READY_POLL_S)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: abort open transactions, close clients), then end the group;
        remove the data and socket directories. Safe to call more than once."""
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.kill(self.proc.pid, signal.SIGINT)
                    self.proc.wait(STOP_GRACE_S)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            terminate(self.proc, grace_s=1.0)
            self.proc = None
        for d in (self._fallback, self.data_dir, self.sock_dir):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)
        if self.data_dir is not None and self._fallback is None:
            try:
                self.data_dir.parent.rmdir()  # services/NAME/, now empty
            except OSError:
                pass
        self.data_dir = self.sock_dir = self._fallback = None
        if self._cleanup_key:
            forget(self._cleanup_key)
            self._cleanup_key = ""
