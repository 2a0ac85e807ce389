"""The RMI server's connection slots (servers/PROTOCOL.md "Java RMI"): `rmi-single` serves one
connection at a time, the next waits unaccepted in the backlog until the first closes;
`rmi --threads 2` serves two at once. Seen from raw sockets speaking the first step of JRMP
(the client's `JRMI` header; an accepted connection answers with ProtocolAck, 0x4E)."""

import socket
import subprocess
import time

import pytest
import setup_kit

from orchestrator.proc import ports
from orchestrator.run import bundled

JRMP_HEADER = b"JRMI\x00\x02\x4b"  # magic, version 2, StreamProtocol
PROTOCOL_ACK = 0x4E


@pytest.fixture
def rmi_server(request):
    setup_kit.require_jdk(17)
    setup_kit.build("java")
    procs = []

    def start(model: str, threads: int = 4) -> int:
        port = ports.free_port()
        argv = bundled.command("java", model, port, threads=threads)
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        procs.append(proc)
        line = proc.stdout.readline().decode()
        assert f"listening on 127.0.0.1:{port} impl=java model={model}" in line, (
            line,
            proc.stderr.read1(4096) if proc.poll() is not None else b"",
        )
        return port

    yield start
    for p in procs:
        p.kill()
        p.wait(5)


def _hello(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(JRMP_HEADER)
    return s


def _acked(s: socket.socket, wait_s: float) -> bool:
    s.settimeout(wait_s)
    try:
        return s.recv(1)[:1] == bytes([PROTOCOL_ACK])
    except TimeoutError:
        return False


def test_rmi_single_serves_one_connection_at_a_time(rmi_server):
    port = rmi_server("rmi-single")
    first = _hello(port)
    assert _acked(first, 5.0)
    second = _hello(port)  # connected by the kernel, not accepted by the server
    assert not _acked(second, 0.5)
    first.close()  # frees the one slot
    t0 = time.monotonic()
    assert _acked(second, 5.0)
    assert time.monotonic() - t0 < 5.0
    second.close()


def test_rmi_serves_threads_connections_at_once(rmi_server):
    port = rmi_server("rmi", threads=2)
    a, b = _hello(port), _hello(port)
    assert _acked(a, 5.0) and _acked(b, 5.0)
    c = _hello(port)
    assert not _acked(c, 0.5)  # the third waits for a slot
    a.close()
    assert _acked(c, 5.0)
    b.close()
    c.close()
