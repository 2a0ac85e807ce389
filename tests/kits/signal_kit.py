"""Waiting for the event a test depends on, never for a length of time.

Why: `send(request); time.sleep(0.3); assert ...` says "by now the server has the request".
On a shared 2-core host it sometimes has not, and then the test passes without testing what
it names (a SIGTERM "during a request" that came before it; a slowloris "stalling" a server
that has not yet seen it). Here a test waits for the signal itself, under a deadline, and a
deadline that passes fails the test with what never happened and the last reading:

- `wait_for(condition, what)`: any condition (a /stats counter, a log line, a process tree);
- `wait_server_read(sock)`: the kernel's view of one connection: every byte the client sent
  is acknowledged, and the server's end of it holds none unread (it read them), asked over
  sock_diag (orchestrator/measure/sock_diag.py).

Tests import it as `signal_kit` (tests/conftest.py puts tests/ on sys.path).
"""

from __future__ import annotations

import fcntl
import socket
import termios
import time
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.measure.sock_diag import TCP_ESTABLISHED, SockDiag


def wait_for(
    condition: Callable[[], Any],
    what: str,
    timeout_s: float = 10.0,
    reading: Callable[[], Any] | None = None,
) -> Any:
    """Poll condition() until it returns something truthy, and return that. After timeout_s
    fail the test: "`what` did not happen within timeout_s s", with reading() (or the last
    value of condition()) in the message. The poll starts at 1 ms and backs off to 50 ms, so
    a fast event costs little and a slow one no CPU to speak of."""
    deadline = time.monotonic() + timeout_s
    interval_s = 0.001
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            last = reading() if reading is not None else value
            pytest.fail(f"{what} did not happen within {timeout_s:g} s; last reading: {last!r}")
        time.sleep(interval_s)
        interval_s = min(interval_s * 2, 0.05)


def unacked_bytes(sock: socket.socket) -> int:
    """Bytes this TCP socket sent that its peer's kernel has not acknowledged yet (SIOCOUTQ)."""
    return int.from_bytes(fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"), "little")


def server_unread_bytes(client: socket.socket, diag: SockDiag | None = None) -> int | None:
    """The bytes the server's end of `client`'s connection holds unread (its receive queue),
    or None while the server has no established socket for it (a C server's TCP_DEFER_ACCEPT
    keeps it a request socket until the first bytes arrive)."""
    local_port = client.getsockname()[1]
    server_port = client.getpeername()[1]
    own = diag is None
    diag = diag or SockDiag()
    try:
        for s in diag.sockets(server_port, 1 << TCP_ESTABLISHED):
            if s.dport == local_port:
                return s.rqueue
        return None
    finally:
        if own:
            diag.close()


def wait_server_read(
    client: socket.socket, what: str = "the server reading this request", timeout_s: float = 10.0
) -> None:
    """Wait until the server has read every byte `client` has sent so far: the client's
    kernel has them all acknowledged, and the server's socket holds none unread. Fails the
    test after timeout_s with both readings."""
    with SockDiag() as diag:

        def state() -> dict:
            return {
                "client_unacked_bytes": unacked_bytes(client),
                "server_unread_bytes": server_unread_bytes(client, diag),
            }

        wait_for(
            lambda: (s := state())["client_unacked_bytes"] == 0 and s["server_unread_bytes"] == 0,
            what,
            timeout_s,
            reading=state,
        )
