"""Model `pool`: an accept thread puts accepted connections on a bounded queue.Queue (size
`backlog`); N worker threads each take one connection and serve it (blocking sockets, keep-alive,
pipelining in order) until it closes. sleep_us is a time.sleep.
"""

from __future__ import annotations

import queue
import socket
import sys
import threading
import time

from protocol import DbPending, Pending, State, handle
from request_reader import Session

_now = time.perf_counter_ns


def _serve(st: State, conn: socket.socket, t_accept: int, tls=None) -> None:
    t_taken = _now()
    session = Session()
    first = True
    try:
        limit = st.idle_timeout_s
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:  # the handshake, in this worker thread
            conn.settimeout(limit)
            try:
                conn = tls.wrap_socket(conn, server_side=True)
            except OSError:  # not TLS, a handshake that failed or timed out
                return
        while True:
            since = session.request_since_ns  # a request trickling in (slowloris) gets only
            left = limit - (_now() - since) / 1e9 if since is not None else limit  # the rest
            if left <= 0:
                return
            conn.settimeout(left)
            try:
                data = conn.recv(65536)
            except OSError:  # idle or request timeout, reset
                return
            if not data:
                return
            for item in session.feed(data):
                t_start = _now()
                q_ns = (t_taken - t_accept) if first else max(0, t_start - item.t_done)
                first = False
                r = handle(st, item, q_ns, t_start)
                if isinstance(r, Pending):
                    if r.sleep_s > 0:
                        time.sleep(r.sleep_s)
                    r = r.finish()
                elif isinstance(r, DbPending):
                    r = st.db.run(r)
                data, close = r
                try:
                    conn.sendall(data)
                except OSError:
                    return
                st.responded()
                if close:
                    return
    finally:
        try:
            conn.close()
        except OSError:
            pass
        st.conn_delta(-1)


def _worker(st: State, q: queue.Queue, tls) -> None:
    while True:
        conn, t_accept = q.get()
        try:
            _serve(st, conn, t_accept, tls)
        except Exception as e:  # never let one connection kill a worker
            print(f"perfctl-server: worker error: {e!r}", file=sys.stderr, flush=True)


def _acceptor(st: State, sock: socket.socket, q: queue.Queue) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError as e:
            if sock.fileno() < 0:
                return
            print(f"perfctl-server: accept: {e}", file=sys.stderr, flush=True)
            time.sleep(0.01)
            continue
        st.conn_delta(1)
        q.put((conn, _now()))


def run(state: State, sock: socket.socket, announce, tls=None) -> int:
    """Serve forever (the main thread accepts); server.py's signal thread ends the process.
    tls: an ssl.SSLContext (HTTPS on every connection) or None."""
    q: queue.Queue = queue.Queue(maxsize=max(1, state.backlog))
    state.queue_length = q.qsize
    for i in range(state.threads):
        threading.Thread(
            target=_worker, args=(state, q, tls), name=f"worker-{i}", daemon=True
        ).start()
    announce()
    _acceptor(state, sock, q)
    return 0
