"""A small discrete-event simulation of a server by how it dispatches work, the truth for the
station models whose discipline Ciw does not have (connections pinned to workers, a queue in
the client, event loops that own their connections, closed loops of users).

What it simulates, as perfctl's load generator and the bundled servers behave:
- the client: open Poisson arrivals (or N users with exponential think times), over L
  keep-alive connections (an idle connection is reused last-in first-out, as
  loadgen/modes/open_loop.py does; an arrival with none idle waits in a FIFO in the client) or
  over a new connection per request (connections=None);
- the network: a fixed one-way delay of overhead/2 each way;
- the server: `shared` (c workers, one FIFO of requests), `pinned` (a worker takes the next
  waiting connection and keeps it until it closes: a pool server), `loops` (connection i
  belongs to loop i mod c; each loop serves its connections' requests one at a time, FIFO).
Service times are exponential with mean S. Requests still unanswered at the end (a starved
connection's; there is no client timeout) are counted, not timed.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Result:
    response_s: np.ndarray  # of requests sent after the warm-up and answered
    unanswered: int  # sent (warm-up included), never answered: starved connections'
    sent: int  # every request sent

    @property
    def mean(self) -> float:
        return float(self.response_s.mean())

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.response_s, q))


@dataclass
class _Conn:
    index: int
    worker: int | None = None  # pinned: the worker that took it
    busy: bool = False
    waiting: deque = field(default_factory=deque)  # requests at the server, this connection


def simulate(
    dispatch: str,
    servers: int,
    mean_service_s: float,
    *,
    rate_rps: float = 0.0,
    users: int = 0,
    think_s: float = 0.0,
    connections: int | None = None,
    overhead_s: float = 0.0,
    requests: int = 100_000,
    seed: int = 1,
) -> Result:
    """Open (rate_rps > 0) or closed (users > 0) load on one simulated server; the first 10 %
    of the requests are warm-up."""
    rng = np.random.default_rng(seed)
    heap: list = []
    seq = itertools.count()
    now = 0.0

    def at(t: float, what: str, *data) -> None:
        heapq.heappush(heap, (t, next(seq), what, data))

    half = overhead_s / 2.0
    free_workers = list(range(servers))
    server_fifo: deque = deque()  # shared: (request, conn); pinned: conns waiting for a worker
    loop_busy = [False] * servers
    loop_fifo = [deque() for _ in range(servers)]
    idle: list[_Conn] = []
    client_fifo: deque = deque()
    sent_at: dict[int, float] = {}
    done: list[tuple[int, float]] = []
    n_conn = itertools.count()
    warm = requests // 10
    issued = 0

    def service() -> float:
        return float(rng.exponential(mean_service_s))

    def send(req: int, conn: _Conn) -> None:
        conn.busy = True
        at(now + half, "arrive", req, conn)

    def start_worker(w: int, req: int, conn: _Conn) -> None:
        at(now + service(), "served", w, req, conn)

    def new_request(user: int | None) -> None:
        nonlocal issued
        req = issued
        issued += 1
        sent_at[req] = now
        if connections is None:
            send(req, _Conn(next(n_conn)))
        elif users:
            send(req, user_conns[user])
        elif idle:
            send(req, idle.pop())
        else:
            client_fifo.append(req)

    user_conns = {}
    if users and connections is not None:
        user_conns = {u: _Conn(next(n_conn)) for u in range(users)}
    if not users and connections is not None:
        idle.extend(_Conn(next(n_conn)) for _ in range(connections))
    if users:
        for u in range(users):
            at(rng.exponential(think_s) if think_s else 0.0, "user", u)
    else:
        at(rng.exponential(1.0 / rate_rps), "arrival")
    owner: dict[int, int] = {}  # request -> user (closed)

    while heap:
        now, _, what, data = heapq.heappop(heap)
        if what == "arrival":
            if issued < requests:
                new_request(None)
                at(now + rng.exponential(1.0 / rate_rps), "arrival")
        elif what == "user":
            if issued < requests:
                (u,) = data
                owner[issued] = u
                new_request(u)
        elif what == "arrive":
            req, conn = data
            if dispatch == "shared":
                if free_workers:
                    start_worker(free_workers.pop(), req, conn)
                else:
                    server_fifo.append((req, conn))
            elif dispatch == "pinned":
                if conn.worker is not None:
                    start_worker(conn.worker, req, conn)
                elif free_workers:
                    conn.worker = free_workers.pop()
                    start_worker(conn.worker, req, conn)
                else:
                    conn.waiting.append(req)
                    server_fifo.append(conn)
            else:  # loops
                loop = conn.index % servers
                if loop_busy[loop]:
                    loop_fifo[loop].append((req, conn))
                else:
                    loop_busy[loop] = True
                    start_worker(loop, req, conn)
        elif what == "served":
            w, req, conn = data
            at(now + half, "answer", req, conn)
            keep = connections is not None
            if dispatch == "shared":
                if server_fifo:
                    start_worker(w, *server_fifo.popleft())
                else:
                    free_workers.append(w)
            elif dispatch == "pinned":
                if not keep:  # the connection closes: the worker takes the next one
                    if server_fifo:
                        nxt = server_fifo.popleft()
                        nxt.worker = w
                        start_worker(w, nxt.waiting.popleft(), nxt)
                    else:
                        free_workers.append(w)
            else:
                if loop_fifo[w]:
                    start_worker(w, *loop_fifo[w].popleft())
                else:
                    loop_busy[w] = False
        elif what == "answer":
            req, conn = data
            done.append((req, now - sent_at.pop(req)))
            conn.busy = False
            if users:
                u = owner.pop(req)
                at(now + (rng.exponential(think_s) if think_s else 0.0), "user", u)
            elif connections is not None:
                if client_fifo:
                    send(client_fifo.popleft(), conn)
                else:
                    idle.append(conn)
    measured = [t for r, t in done if r >= warm]
    return Result(np.asarray(measured), len(sent_at), issued)
