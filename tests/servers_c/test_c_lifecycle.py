"""Command line, listening line, signals, slowloris and descriptor hygiene of the C server."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import pytest
from signal_kit import wait_for, wait_server_read


@pytest.mark.parametrize(
    "argv, needle",
    [
        ([], "--port"),
        (["--port", "0", "--model", "fibers"], "--model"),
        (["--port", "70000"], "--port"),
        (["--port", "0", "--threads", "0"], "--threads"),
        (["--port", "0", "--threads", "x"], "--threads"),
        (["--port", "0", "--layout", "tree"], "--layout"),
        (["--port", "0", "--buckets", "-1"], "--buckets"),
        (["--port", "0", "--corpus", "/nonexistent/sentences.tsv"], "--corpus"),
        (["--port", "0", "--bogus", "1"], "--bogus"),
        (["--port"], "--port"),
    ],
)
def test_c_bad_flags_exit_2(c_binaries, argv, needle):
    proc = subprocess.run(
        [str(c_binaries["all"]), *argv], capture_output=True, text=True, timeout=10
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("model", ["single", "thread", "pool", "epoll"])
def test_c_listening_line_and_sigint(c_server, http, model):
    srv = c_server(
        model, threads=3, extra=["--backlog", "64", "--layout", "by-type", "--seed", "9"]
    )
    want = (
        f"perfctl-server listening on 127.0.0.1:{srv.port} impl=c model={model} "
        f"threads={1 if model == 'single' else 3} backlog=64\n"
    ).encode()
    assert srv.line == want
    st = json.loads(http.get(srv.port, "/stats").body)
    assert st["threads"] == {"single": 1, "thread": 1, "pool": 3, "epoll": 3}[model]
    # by-type and flat layouts agree
    r = http.get(srv.port, "/search?type=2&re=%5EThe%20(server%7Ckernel)%20.*s%5C.%24")
    assert json.loads(r.body) == {"type": 2, "matches": 258}
    # SIGINT with an idle keep-alive connection and a request in mid-sleep: exit 0 within 2 s
    idle = http.connect(srv.port)
    busy = http.connect(srv.port)
    busy.sendall(b"GET /work?sleep_us=5000000 HTTP/1.1\r\n\r\n")
    wait_server_read(busy, f"{model}: the server reading the 5 s request before SIGINT")
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGINT)
    rc = srv.proc.wait(timeout=3)
    assert rc == 0 and time.monotonic() - t0 < 2.0
    idle.close()
    busy.close()


def test_c_flat_layout_count(c_server, http):
    srv = c_server("epoll", threads=1)
    r = http.get(srv.port, "/search?type=2&re=%5EThe%20(server%7Ckernel)%20.*s%5C.%24")
    assert json.loads(r.body) == {"type": 2, "matches": 258}
    # '+' in a query value is a space (form decoding), %2B is a plus
    assert json.loads(http.get(srv.port, "/search?type=1&re=near+a").body)["matches"] > 0
    assert json.loads(http.get(srv.port, "/search?type=1&re=ne%2Bar").body)["matches"] > 0


def test_c_slowloris_idle_timeout(c_server, http):
    """A stalled partial request ties up only its own connection (and `single` until the 10 s
    idle timeout); the server then drops it and leaks no descriptor."""
    single = c_server("single")
    epoll = c_server("epoll", threads=1)
    base = {s.model: s.fd_count() for s in (single, epoll)}
    stalls = {}
    for s in (single, epoll):
        c = http.connect(s.port, timeout=15)
        c.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
        stalls[s.model] = c
    for model, c in stalls.items():
        wait_server_read(c, f"{model}: the server reading the stalled partial request")
    # epoll keeps serving others meanwhile
    assert http.get(epoll.port, "/health").status == 200
    # single is busy with the staller: a second client waits (connect succeeds via backlog)
    done = threading.Event()
    got = {}

    def other():
        # it waits out the staller's 10 s idle timeout: a client timeout well past that
        got["r"] = http.exchange(single.port, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n", 20)[0]
        got["t"] = time.monotonic()
        done.set()

    t0 = time.monotonic()
    threading.Thread(target=other, daemon=True).start()
    for model, c in stalls.items():
        c.settimeout(14)
        try:
            data = c.recv(100)
        except ConnectionResetError:
            data = b""
        waited = time.monotonic() - t0
        assert data == b"", f"{model}: unexpected {data!r}"
        assert 8.5 < waited < 13.5 or model == "epoll", f"{model}: closed after {waited:.1f}s"
        c.close()
    assert done.wait(5), "single never served the second client"
    assert got["r"].status == 200 and got["t"] - t0 > 8.5
    for s in (single, epoll):
        wait_for(
            lambda s=s: s.fd_count() <= base[s.model],
            f"{s.model}: its descriptors back to the {base[s.model]} it had before",
            timeout_s=3,
            reading=s.fd_count,
        )
        assert s.fd_count() == base[s.model]
