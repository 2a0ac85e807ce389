"""measure/sock_diag.py: the TCP sockets of one port from the kernel over netlink, in our network
namespace and in another process's, agreeing with /proc/net/tcp."""

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from orchestrator.measure import kernel_tcp
from orchestrator.measure.sock_diag import TCP_ESTABLISHED, TCP_LISTEN, SockDiag


@pytest.mark.usefixtures("live")
def test_accept_queue_and_established_sockets_agree_with_proc():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(50)
    port = listener.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(7)]
    try:
        with SockDiag() as d:
            assert d.listen_queue(port) == 7 == kernel_tcp.listen_queue("self", port)
            est = d.sockets(port, 1 << TCP_ESTABLISHED)
            assert sorted(s.dport for s in est) == sorted(c.getsockname()[1] for c in clients)
            assert {(s.src, s.dst, s.state) for s in est} == {("127.0.0.1", "127.0.0.1", 1)}
            [lis] = d.sockets(port, 1 << TCP_LISTEN)
            assert (lis.rqueue, lis.wqueue, lis.state) == (7, 50, TCP_LISTEN)
            assert d.listen_queue(port + 1 if port < 65535 else 1) is None
    finally:
        for c in clients:
            c.close()
        listener.close()


@pytest.mark.usefixtures("live")
def test_an_ipv6_listener_is_found():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    listener = socket.socket(socket.AF_INET6)
    try:
        listener.bind(("::1", 0))
    except OSError:
        pytest.skip("no ::1 here")
    listener.listen(5)
    port = listener.getsockname()[1]
    try:
        with SockDiag() as d:
            [s] = d.sockets(port, 1 << TCP_LISTEN)
            assert (s.family, s.src, s.rqueue, s.wqueue) == (socket.AF_INET6, "::1", 0, 5)
    finally:
        listener.close()


LISTEN_AND_WAIT = """
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(3)
print(s.getsockname()[1], flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="root and unshare")
@pytest.mark.usefixtures("live")
def test_the_socket_of_a_process_in_its_own_network_namespace():
    """A netem trial's server runs in a namespace of its own: the watch must look there (its
    port is not listening in ours)."""
    p = subprocess.Popen(
        [
            "unshare",
            "--net",
            "--",
            "sh",
            "-c",
            f"ip link set lo up && exec {sys.executable} -c '{LISTEN_AND_WAIT}'",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(p.stdout.readline())
        with SockDiag(p.pid) as theirs, SockDiag() as ours:
            assert theirs.listen_queue(port) == 0
            [s] = theirs.sockets(port, 1 << TCP_LISTEN)
            assert s.wqueue == 3
            assert ours.listen_queue(port) is None
        watch = kernel_tcp.AcceptQueueWatch(p.pid, port).start()
        assert watch.source == "sock_diag"
        assert watch.stop() == 0
    finally:
        p.kill()
        p.wait()


@pytest.mark.usefixtures("live")
def test_the_watch_polls_over_netlink_and_sees_the_peak():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(20)
    port = listener.getsockname()[1]
    watch = kernel_tcp.AcceptQueueWatch(os.getpid(), port).start()
    assert watch.source == "sock_diag" and watch.interval_s == kernel_tcp.ACCEPT_QUEUE_POLL_S
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
    deadline = time.monotonic() + 5
    while not watch.peak >= 5 and time.monotonic() < deadline:  # a poll after the connects
        time.sleep(kernel_tcp.ACCEPT_QUEUE_POLL_S)
    for _ in range(5):
        listener.accept()[0].close()
    assert watch.stop() == 5
    for c in clients:
        c.close()
    listener.close()
