"""TCP sockets of one port, asked of the kernel over netlink (NETLINK_SOCK_DIAG, the interface
`ss` uses) instead of read from /proc/net/tcp{,6}.

Why: /proc/net/tcp6 is produced by walking every bucket of the kernel's established-socket
hash table, which is sized from the RAM (262,144 buckets on a 24 GiB host), even when the
reader wants only the first lines. One poll of both files cost 4-6 ms of CPU there; at the
accept-queue watch's 50 polls/s perfctl burned ~25% of a CPU, on the load generator's CPU,
and the load generator waited 80-106 ms/s for it (trials read "not quiet" on an idle host).
A sock_diag dump asks for the states it wants (LISTEN only never touches that table) and the
kernel filters by port: ~20-40 us per query.

A socket here belongs to the network namespace it was opened in: `SockDiag(pid)` opens it in
pid's (a thread enters that namespace with setns(2) for the open, then leaves). Standard
library and libc only. Errors: OSError from the constructor when netlink or the namespace
is unavailable (callers fall back to /proc).
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
from dataclasses import dataclass

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
CLONE_NEWNET = 0x40000000
TCP_ESTABLISHED, TCP_LISTEN = 1, 10

_NLMSGHDR = struct.Struct("=IHHII")
# inet_diag_req_v2: family, protocol, ext, pad, states; inet_diag_sockid: sport, dport (big
# endian), src[4], dst[4], if, cookie[2]
_REQ = struct.Struct("=BBBBI")
# inet_diag_msg: family, state, timer, retrans, sockid (48 bytes), expires, rqueue, wqueue,
# uid, inode
_MSG_HEAD = struct.Struct("=BBBB")
_MSG_TAIL = struct.Struct("=IIIII")


@dataclass(frozen=True)
class TcpSocket:
    family: int  # socket.AF_INET or AF_INET6
    state: int  # TCP_LISTEN, TCP_ESTABLISHED, ...
    src: str
    sport: int
    dst: str
    dport: int
    rqueue: int  # LISTEN: connections waiting for accept(); else bytes unread
    wqueue: int  # LISTEN: the accept queue's limit (backlog); else bytes unsent


def _request(family: int, states: int, sport: int, seq: int) -> bytes:
    body = (
        _REQ.pack(family, socket.IPPROTO_TCP, 0, 0, states)
        + struct.pack(">HH", sport, 0)
        + bytes(32)
        + struct.pack("=I", 0)
        + bytes(8)
    )
    return (
        _NLMSGHDR.pack(
            _NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0
        )
        + body
    )


def _address(family: int, raw: bytes) -> str:
    if family == socket.AF_INET:
        return socket.inet_ntop(family, raw[:4])
    text = socket.inet_ntop(family, raw)
    return text[7:] if text.startswith("::ffff:") and "." in text else text


def _parse(msg: bytes) -> TcpSocket:
    family, state, _, _ = _MSG_HEAD.unpack_from(msg, 0)
    sport, dport = struct.unpack_from(">HH", msg, 4)
    src, dst = msg[8:24], msg[24:40]
    _, rqueue, wqueue, _, _ = _MSG_TAIL.unpack_from(msg, 4 + 48)
    return TcpSocket(
        family, state, _address(family, src), sport, _address(family, dst), dport, rqueue, wqueue
    )


def _open_in(pid: int | None) -> socket.socket:
    """A sock_diag netlink socket in pid's network namespace (ours when pid is None or
    shares it)."""

    def make() -> socket.socket:
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)

    if pid is None:
        return make()
    theirs = os.stat(f"/proc/{pid}/ns/net").st_ino
    if theirs == os.stat("/proc/self/ns/net").st_ino:
        return make()
    libc = ctypes.CDLL(None, use_errno=True)
    result: list = []

    def enter_open_leave() -> None:  # namespaces are per thread: only this one moves
        try:
            home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
            there = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(there, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into the network namespace of {pid}")
                try:
                    result.append(make())
                finally:
                    if libc.setns(home, CLONE_NEWNET) != 0:  # pragma: no cover
                        raise OSError(ctypes.get_errno(), "setns back")
            finally:
                os.close(home)
                os.close(there)
        except OSError as e:
            result.append(e)

    t = threading.Thread(target=enter_open_leave, name="sock-diag-netns")
    t.start()
    t.join()
    if isinstance(result[0], OSError):
        raise result[0]
    return result[0]


class SockDiag:
    """Dumps of the TCP sockets with one local port, in pid's network namespace."""

    def __init__(self, pid: int | None = None) -> None:
        self.sock = _open_in(pid)
        self.sock.settimeout(2.0)
        self._seq = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> SockDiag:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sockets(self, sport: int, states: int) -> list[TcpSocket]:
        """The TCP sockets (IPv4 and IPv6) whose local port is sport and whose state is in
        the bit mask states (1 << TCP_LISTEN, ...)."""
        out: list[TcpSocket] = []
        for family in (socket.AF_INET, socket.AF_INET6):
            self._seq += 1
            self.sock.send(_request(family, states, sport, self._seq))
            done = False
            while not done:
                data = self.sock.recv(65536)
                off = 0
                while off + _NLMSGHDR.size <= len(data):
                    length, kind, _, seq, _ = _NLMSGHDR.unpack_from(data, off)
                    if length < _NLMSGHDR.size:
                        done = True
                        break
                    if seq == self._seq:
                        if kind == NLMSG_DONE:
                            done = True
                        elif kind == NLMSG_ERROR:
                            err = -struct.unpack_from("=i", data, off + _NLMSGHDR.size)[0]
                            if err:
                                raise OSError(err, os.strerror(err))
                            done = True
                        elif kind == SOCK_DIAG_BY_FAMILY:
                            s = _parse(data[off + _NLMSGHDR.size : off + length])
                            if s.sport == sport:
                                out.append(s)
                    off += (length + 3) & ~3
        return out

    def listen_queue(self, port: int) -> int | None:
        """The accept queue's length now at the socket listening on port (the longest, when
        several share it with SO_REUSEPORT), or None when none listens."""
        found = self.sockets(port, 1 << TCP_LISTEN)
        return max(s.rqueue for s in found) if found else None
