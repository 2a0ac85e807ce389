"""Raw-socket HTTP/1.1 client and server launcher for the conformance suite.

Everything here talks only to 127.0.0.1, has a timeout on every socket operation and bounds
every loop, so a broken server fails a test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from setup_kit import build_failed, require_jdk
from signal_kit import wait_for

from orchestrator.experiment.catalogue import CONCURRENCY_MODELS, RMI_MODELS
from orchestrator.run import bundled

HOST = "127.0.0.1"
# every bundled server that speaks HTTP (the RMI models speak Java RMI: the driver contract
# suite, tests/loadgen/test_driver_contract.py, and tests/servers_java cover them)
IMPL_MODELS = [
    (impl, model)
    for impl in ("python", "c", "java")
    for model in CONCURRENCY_MODELS[impl]
    if model not in RMI_MODELS
]
SERVER_TIMING = re.compile(
    r"queue;dur=(\d+\.\d{3}), svc;dur=(\d+\.\d{3})"
    r"(?:, db;dur=(\d+\.\d{3}))?"
)  # db: /db responses only
LISTENING = re.compile(
    r"perfctl-server listening on 127\.0\.0\.1:(\d+) impl=(\w+) "
    r"model=(\w+) threads=(\d+) backlog=(\d+)"
)
THREADS = 4  # --threads of every server the suite starts
BACKLOG = 512  # the load test opens 200 connections at once; don't test overload here
MAX_HEAD = 64 * 1024
MAX_BODY = 17 * 1024 * 1024


def slow_enabled() -> bool:
    """Tests that take ~10 s per server (idle timeout) run only with this set."""
    return os.environ.get("PERFCTL_CONFORMANCE_SLOW") == "1"


class ProtocolError(AssertionError):
    """The server's bytes are not a well-formed perfctl response."""


@dataclass
class Response:
    status: int
    reason: str
    headers: dict[str, str]  # lower-cased names; a repeated header keeps the last
    body: bytes
    raw_head: bytes = b""
    header_list: list[tuple[str, str]] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def timing(self) -> tuple[float, float]:
        m = SERVER_TIMING.fullmatch(self.headers.get("server-timing", ""))
        if not m:
            raise ProtocolError(f"bad Server-Timing: {self.headers.get('server-timing')!r}")
        return float(m.group(1)), float(m.group(2))

    def json(self):
        return json.loads(self.body)


def check_common(resp: Response) -> None:
    """What every response of every server must carry (PROTOCOL.md, HTTP)."""
    if "content-length" not in resp.headers:
        raise ProtocolError(f"{resp.status}: no Content-Length")
    if "content-type" not in resp.headers:
        raise ProtocolError(f"{resp.status}: no Content-Type")
    if "transfer-encoding" in resp.headers:
        raise ProtocolError(f"{resp.status}: Transfer-Encoding in a response")
    if not SERVER_TIMING.fullmatch(resp.headers.get("server-timing", "")):
        raise ProtocolError(
            f"{resp.status}: Server-Timing missing or malformed: "
            f"{resp.headers.get('server-timing')!r}"
        )


class Conn:
    """One client connection with a read buffer (so pipelined responses split correctly)."""

    def __init__(self, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def reset(self) -> None:
        """Close with SO_LINGER 0: the peer gets an RST instead of a FIN."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(262144)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def read_response(self, check: bool = True, no_body: bool = False) -> Response:
        """One response; `no_body`: it answers a HEAD request, so it has no body whatever its
        Content-Length says."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self.buf) > MAX_HEAD:
                raise ProtocolError("response head over 64 KiB")
            if not self._fill():
                raise ConnectionError(f"closed before a full response head: {self.buf[:200]!r}")
        head, self.buf = self.buf[:end], self.buf[end + 4 :]
        lines = head.decode("latin-1").split("\r\n")
        m = re.fullmatch(r"HTTP/1\.[01] (\d{3})(?: (.*))?", lines[0])
        if not m:
            raise ProtocolError(f"bad status line {lines[0]!r}")
        headers: dict[str, str] = {}
        hlist = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise ProtocolError(f"bad response header line {line!r}")
            headers[name.lower()] = value.strip()
            hlist.append((name, value.strip()))
        cl = headers.get("content-length", "0")
        if not cl.isdigit() or int(cl) > MAX_BODY:
            raise ProtocolError(f"bad Content-Length {cl!r}")
        n = 0 if no_body else int(cl)
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError(f"closed after {len(self.buf)} of {n} body bytes")
        body, self.buf = self.buf[:n], self.buf[n:]
        resp = Response(int(m.group(1)), m.group(2) or "", headers, body, head, hlist)
        if check:
            check_common(resp)
        return resp

    def request(
        self,
        target: str,
        method: str = "GET",
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        version: str = "HTTP/1.1",
    ) -> Response:
        self.send(build(method, target, body, headers, version))
        return self.read_response()

    def peer_closed(self, timeout: float = 3.0) -> bool:
        """True once the server has closed (FIN or RST) within `timeout`; False if it stays open.
        Unexpected extra bytes are an error."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            return True
        if chunk:
            raise ProtocolError(f"unexpected bytes after the response: {chunk[:200]!r}")
        return True


def settle(c: Conn, timeout: float = 5.0) -> dict:
    """Poll /stats on `c` until the server has no other connection and nothing queued (work
    left behind by earlier tests has finished); returns that /stats. Fails the test if the
    server does not settle within `timeout` (what the caller counts next would be off)."""
    last: dict = {}

    def idle() -> dict | None:
        last.update(c.request("/stats").json())
        return dict(last) if last["connections"] <= 1 and last["queue_length"] == 0 else None

    return wait_for(
        idle,
        "the server settling (no connection but this one, nothing queued)",
        timeout,
        reading=lambda: last,
    )


def build(
    method: str,
    target: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    version: str = "HTTP/1.1",
) -> bytes:
    h = {"Host": "127.0.0.1"}
    if body or method == "POST":
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    head = f"{method} {target} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
    return head.encode("latin-1") + b"\r\n" + body


def get(port: int, target: str, timeout: float = 5.0, **kw) -> Response:
    with Conn(port, timeout) as c:
        return c.request(target, **kw)


def exchange(port: int, raw: bytes, timeout: float = 5.0) -> tuple[list[Response], bool, str]:
    """Send raw bytes on a fresh connection; read responses until the server closes or goes
    quiet. Returns (responses, closed_by_server, leftover_error)."""
    out: list[Response] = []
    with Conn(port, timeout) as c:
        try:
            c.send(raw)
        except OSError as e:
            return out, True, f"send: {e}"
        for _ in range(8):
            try:
                out.append(c.read_response())
            except TimeoutError:
                return out, False, ""
            except ConnectionError as e:
                return out, True, "" if not c.buf else str(e)
            c.sock.settimeout(0.5)  # after the first response, a short wait is enough
        return out, False, ""


# -- launching -------------------------------------------------------------------------------

_build_errors: dict[str, str | None] = {}


def build_error(impl: str, model: str | None = None) -> str | None:
    """None if `impl` (and a model on a real stack, servlet or spring) is built (tried once per
    session, so a broken build fails every test that needs it at once), else why not."""
    from orchestrator.errors import PerfctlError
    from orchestrator.experiment.catalogue import STACK_MODELS

    key = impl if model not in STACK_MODELS.get(impl, ()) else f"{impl}-stacks"
    if key not in _build_errors:
        try:
            bundled.build(impl, model=model if key != impl else None)
            _build_errors[key] = None
        except PerfctlError as e:
            lines = str(e).splitlines()
            _build_errors[key] = " | ".join([lines[0]] + lines[-2:]) if lines else str(e)
        except Exception as e:  # e.g. make missing: a failure all the same
            _build_errors[key] = f"{type(e).__name__}: {e}"
    return _build_errors[key]


def server_argv(impl: str, model: str, **kw) -> list[str]:
    """Build and return the argv for (impl, model) on --port 0. A failed build, or a binary or
    classes missing after it, fails the test (make setup builds every bundled server); only a
    JDK that make setup does not install (>= 21, for `virtual`) skips, with the reason."""
    if impl == "java":
        require_jdk(21 if model == "virtual" else 17)
    err = build_error(impl, model)
    if err:
        build_failed(f"the bundled {impl} server (for {impl}/{model})", err)
    argv = bundled.command(impl, model, 0, **{"threads": THREADS, "backlog": BACKLOG, **kw})
    missing = [
        p
        for p in (
            argv[0],
            *(part for a in argv for part in a.split(":") if part.endswith("/build/classes")),
        )
        if not Path(p).exists()
    ]
    if missing:
        build_failed(f"the bundled {impl} server (for {impl}/{model})", f"{missing[0]} is missing")
    return argv


# -- the server process -------------------------------------------------------------------------------


class Server:
    """One bundled server process in its own process group, stdout/stderr in temp files."""

    def __init__(self, impl: str, model: str, argv: list[str], startup_timeout: float = 30.0):
        self.impl, self.model, self.argv = impl, model, argv
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.line = ""
        self.restarts = -1
        self.start()

    def start(self) -> None:
        self.restarts += 1
        self.out = tempfile.NamedTemporaryFile(prefix="perfctl-conf-out-", delete=False)
        self.err = tempfile.NamedTemporaryFile(prefix="perfctl-conf-err-", delete=False)
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self.out,
            stderr=self.err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            text = Path(self.out.name).read_text(errors="replace")
            if "\n" in text:
                self.line = text.splitlines()[0]
                m = LISTENING.fullmatch(self.line)
                if not m:
                    self.stop()
                    raise RuntimeError(f"bad listening line {self.line!r}")
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self.proc.returncode} before listening:"
                    f" {self.stderr_tail()}"
                )
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(
            f"no listening line within {self.startup_timeout} s: {self.stderr_tail()}"
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_tail(self, n: int = 2000) -> str:
        try:
            return Path(self.err.name).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self, grace: float = 3.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after `grace`; returns the exit status."""
        if self.proc is None:
            return None
        rc = None
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            rc = self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything left in the group
        except (ProcessLookupError, PermissionError):
            pass
        if rc is None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for f in (self.out, self.err):
            f.close()
            try:
                os.unlink(f.name)
            except OSError:
                pass
        return rc
