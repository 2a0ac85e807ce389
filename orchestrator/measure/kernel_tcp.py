"""The kernel's TCP counters around one trial, read from the server's network namespace.

`/proc/<server pid>/net/netstat` and `/proc/<server pid>/net/snmp` hold the counters of the
network namespace the server runs in. A trial reads them just before the load starts and just
after it ends; the differences become trials.csv columns:

- tcp_listen_overflows  TcpExt ListenOverflows: a connection completed its handshake while the
                        listen (accept) queue was full, so the kernel dropped it
- tcp_listen_drops      TcpExt ListenDrops: every SYN or handshake dropped at a listener
                        (overflows included)
- tcp_retrans_segs      Tcp RetransSegs: segments sent again (SYN retries of refused-by-silence
                        clients among them)
- tcp_timeouts          TcpExt TCPTimeouts: retransmission timer expiries
- tcp_resets            Tcp OutRsts: segments sent with RST (refused or aborted connections)
- tcp_abort_on_data     TcpExt TCPAbortOnData: connections reset because data arrived after
                        the application closed them
- tcp_accept_queue_max  the longest accept queue seen at the server's listening socket,
                        polled every ACCEPT_QUEUE_POLL_S (a peak shorter than that can be missed)
                        over netlink sock_diag (sock_diag.py: ~25 us a poll; reading
                        /proc/net/tcp{,6} cost 4-6 ms a poll, a quarter of a CPU at this rate),
                        or from /proc/<pid>/net/tcp{,6} where netlink is refused
- tcp_counters_scope    `namespace` when the server has a network namespace of its own (a
                        netem trial), `host` when it shares the host's: then the deltas also
                        count every other process's TCP traffic in that window.

A counter the kernel does not have is NaN. Standard library only; nothing here raises.
"""

from __future__ import annotations

import math
import os
import threading

from .sock_diag import SockDiag

COUNTERS = {  # trials.csv column -> (/proc/net file, section, counter)
    "tcp_listen_overflows": ("netstat", "TcpExt", "ListenOverflows"),
    "tcp_listen_drops": ("netstat", "TcpExt", "ListenDrops"),
    "tcp_retrans_segs": ("snmp", "Tcp", "RetransSegs"),
    "tcp_timeouts": ("netstat", "TcpExt", "TCPTimeouts"),
    "tcp_resets": ("snmp", "Tcp", "OutRsts"),
    "tcp_abort_on_data": ("netstat", "TcpExt", "TCPAbortOnData"),
}
ACCEPT_QUEUE_POLL_S = 0.02
PROC_POLL_S = 0.25  # the /proc fallback's interval: each read walks the kernel's tables
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
_HEAD_BYTES = 16384  # listening sockets come first in /proc/net/tcp: a page or so is enough


def _sections(text: str) -> dict[str, dict[str, int]]:
    """`Name: k1 k2 ...` / `Name: v1 v2 ...` line pairs -> {Name: {k: v}}."""
    out: dict[str, dict[str, int]] = {}
    lines = text.splitlines()
    for head, vals in zip(lines[::2], lines[1::2]):
        name, _, keys = head.partition(":")
        _, _, values = vals.partition(":")
        try:
            out[name] = dict(zip(keys.split(), map(int, values.split())))
        except ValueError:
            continue
    return out


def snapshot(pid: int | str | None) -> dict[str, float]:
    """The COUNTERS of pid's ("self": this process's) network namespace now (NaN where
    unreadable)."""
    files: dict[str, dict] = {}
    for name in ("netstat", "snmp"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                files[name] = _sections(f.read())
        except (OSError, TypeError):
            files[name] = {}
    return {
        col: float(files[file].get(sec, {}).get(key, math.nan))
        for col, (file, sec, key) in COUNTERS.items()
    }


def scope(pid: int | None) -> str:
    """ "namespace" when pid's network namespace is not this process's, else "host"."""
    try:
        theirs = os.stat(f"/proc/{pid}/ns/net").st_ino
        return "namespace" if theirs != os.stat("/proc/self/ns/net").st_ino else "host"
    except (OSError, TypeError):
        return "unknown"


def deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before per counter (NaN when either side is missing)."""
    return {col: after.get(col, math.nan) - before.get(col, math.nan) for col in COUNTERS}


def listen_queue(pid: int | str, port: int) -> int | None:
    """The accept queue's length now at the socket listening on `port` in pid's namespace, or
    None. For a listening socket /proc/net/tcp's rx_queue is the number of connections
    waiting for accept()."""
    want = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}", "rb") as f:
                head = f.read(_HEAD_BYTES).decode(errors="replace")
        except OSError:
            continue
        for line in head.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 5 or fields[3] != _LISTEN:
                continue
            if fields[1].endswith(want):
                return int(fields[4].partition(":")[2], 16)
    return None


class AcceptQueueWatch:
    """A thread polling the server's accept queue; `peak` is the longest seen (NaN if the
    listening socket was never found)."""

    def __init__(self, pid: int, port: int, interval_s: float = ACCEPT_QUEUE_POLL_S) -> None:
        self.pid, self.port, self.interval_s = pid, port, interval_s
        self.peak = math.nan
        self.source = "none"
        self._diag: SockDiag | None = None
        self._lock = threading.Lock()  # the final poll (stop) and the thread's
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="accept-queue", daemon=True)

    def start(self) -> AcceptQueueWatch:
        try:
            self._diag = SockDiag(self.pid)
            self.source = "sock_diag"
        except OSError:
            self._diag = None  # no netlink here: /proc, less often
            self.source = "proc"
            self.interval_s = max(self.interval_s, PROC_POLL_S)
        self._thread.start()
        return self

    def stop(self) -> float:
        if not self._stop.is_set():
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join()
            self._poll_once()  # the queue as the load ends, whatever the last poll saw
            if self._diag is not None:
                self._diag.close()
                self._diag = None
        return self.peak

    def _poll_once(self) -> None:
        with self._lock:
            q = None
            if self._diag is not None:
                try:
                    q = self._diag.listen_queue(self.port)
                except OSError:
                    q = None
            else:
                q = listen_queue(self.pid, self.port)
        if q is not None:
            self.peak = q if math.isnan(self.peak) else max(self.peak, q)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._poll_once()
            self._stop.wait(self.interval_s)


class TrialCounters:
    """start() before the load, stop() after it: the trials.csv columns of this module."""

    def __init__(self, pid: int | None, port: int) -> None:
        self.pid, self.port = pid, port
        self.scope = "unknown"
        self._source: int | str | None = pid  # where the counters are read
        self._before: dict[str, float] = {}
        self._after: dict[str, float] | None = None
        self._watch: AcceptQueueWatch | None = None

    def start(self) -> TrialCounters:
        self.scope = scope(self.pid)
        if self.scope == "host":  # the same counters, readable even if the server dies
            self._source = "self"
        self._before = snapshot(self._source)
        if self.pid is not None:
            self._watch = AcceptQueueWatch(self.pid, self.port).start()
        return self

    def stop(self) -> None:
        if self._after is None:
            self._after = snapshot(self._source)
        if self._watch is not None:
            self._watch.stop()

    def row(self) -> dict:
        self.stop()
        out: dict = deltas(self._before, self._after or {})
        out["tcp_accept_queue_max"] = self._watch.peak if self._watch else math.nan
        out["tcp_counters_scope"] = self.scope
        return out
