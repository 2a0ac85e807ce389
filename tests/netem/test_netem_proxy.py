"""perfctl-proxy end to end against a local echo server. Timing asserts are deliberately loose
(the host is shared and noisy); the tight accuracy goals live in benchmarks/netem_accuracy.py."""

from __future__ import annotations

import asyncio
import random
import resource
import socket
import statistics
import struct
import subprocess
import threading
import time

import numpy as np
import pytest
import quiet_kit
from scipy import stats
from signal_kit import wait_for

from orchestrator.netem.expected import jitter_samples_ms
from orchestrator.netem.probe import echo_rtt_samples, echo_throughput_bps, interleaved_rtt_ms


def _p50(xs):
    return statistics.median(xs)


def test_netem_listening_line_port0_and_sigterm(run_proxy, echo_port):
    p = run_proxy(echo_port, "--delay", "1ms", echo=True)
    assert p.line.startswith("perfctl-proxy listening on 127.0.0.1:")
    assert p.port > 0 and p.echo_port > 0
    # an open connection does not keep it from exiting cleanly
    s = socket.create_connection(("127.0.0.1", p.port))
    s.sendall(b"hello")
    assert s.recv(5) == b"hello"
    assert p.stop() == 0
    assert p.stats["conns"] == 1 and p.stats["bytes_up"] == 5
    s.close()


def test_netem_bad_flags_exit_2(proxy_bin):
    for flags in (
        ["--delay", "10xs"],
        ["--distribution", "cauchy"],
        ["--loss", "2"],
        ["--bandwidth", "fast"],
        ["--bogus", "1"],
    ):
        proc = subprocess.run(
            [proxy_bin, "--listen", "127.0.0.1:0", "--to", "127.0.0.1:9", *flags],
            capture_output=True,
            text=True,
            timeout=5,
        )
        assert proc.returncode == 2, flags
        assert "perfctl-proxy:" in proc.stderr


def test_netem_ordering_with_jitter(run_proxy, echo_port):
    """Many separate chunks with 0..6 ms random delays arrive in order, bytes identical."""
    p = run_proxy(
        echo_port, "--delay", "3ms", "--jitter", "3ms", "--distribution", "uniform", "--seed", "7"
    )
    rng = random.Random(1)
    parts = [struct.pack("!I", i) + rng.randbytes(rng.randint(1, 3000)) for i in range(500)]
    payload = b"".join(parts)
    got = bytearray()
    s = socket.create_connection(("127.0.0.1", p.port), timeout=20)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def reader():
        while len(got) < len(payload):
            b = s.recv(65536)
            if not b:
                break
            got.extend(b)

    t = threading.Thread(target=reader)
    t.start()
    for part in parts:
        s.sendall(part)
        time.sleep(0.0003)  # separate reads in the proxy -> separate jitter draws
    t.join(30)
    s.close()
    assert bytes(got) == payload
    st = p.live_stats()
    assert st["chunks_up"] >= 100, st  # really many chunks, each with its own draw


@pytest.mark.needs_quiet
def test_netem_delay_adds_rtt(run_proxy, echo_port):
    """Needs quiet: others taking less than 30% of a CPU while the round trips are sampled (a
    stall of the echo server or the proxy shifts a 30-sample median by milliseconds);
    sampled again (quiet_kit), then the test fails with the readings."""
    p = run_proxy(echo_port, "--delay", "10ms")
    p2 = run_proxy(echo_port, "--delay-up", "2ms", "--delay-down", "6ms")

    def added_ms() -> tuple[float, float]:
        direct = _p50(echo_rtt_samples("127.0.0.1", echo_port, samples=30))
        via = _p50(echo_rtt_samples("127.0.0.1", p.port, samples=30))
        asym = _p50(echo_rtt_samples("127.0.0.1", p2.port, samples=20))
        return via - direct, asym - direct

    added, added2 = quiet_kit.quietly(added_ms, "round trips through a 10 ms proxy")
    assert abs(added - 20.0) < 1.0, added
    assert abs(added2 - 8.0) < 1.0, added2  # asymmetric delays add up


@pytest.mark.needs_quiet
@pytest.mark.parametrize("dist", ["uniform", "normal", "pareto"])
def test_netem_jitter_distribution_ks(run_proxy, echo_port, dist):
    """Added RTTs (two independent jittered one-way delays) follow the configured law.

    The host is shared: scheduling noise adds a heavy positive tail to every RTT. A reference
    proxy with the same delay and no jitter is sampled interleaved with the jittered one; its
    excess over 2*delay is the noise, which the model is convolved with before the KS test.

    Needs quiet: others taking less than 30% of a CPU while the round trips are sampled (the
    reference's noise stands in for the jittered proxy's only while both see the same host);
    sampled again (quiet_kit), then the test fails with the readings."""
    d, j = 3.0, 2.0
    ref = run_proxy(echo_port, "--delay", f"{d}ms", echo=True)
    p = run_proxy(
        echo_port,
        "--delay",
        f"{d}ms",
        "--jitter",
        f"{j}ms",
        "--distribution",
        dist,
        "--seed",
        "11",
        echo=True,
    )
    jit, plain = map(
        np.array,
        quiet_kit.quietly(
            lambda: interleaved_rtt_ms(p.echo_port, ref.echo_port, n=150),
            f"round trips through a {dist}-jittered proxy",
        ),
    )
    noise = plain - 2 * d
    rng = np.random.default_rng(3)
    n = 100_000
    model = sum(np.maximum(0.0, d + jitter_samples_ms(rng, n, j, dist)) for _ in range(2))
    model = model + rng.choice(noise, n)
    res = stats.ks_2samp(jit, model)
    assert res.pvalue > 0.001, (
        dist,
        res,
        np.percentile(jit, [10, 50, 90]),
        np.percentile(model, [10, 50, 90]),
        np.percentile(noise, [50, 90]),
    )


@pytest.mark.needs_quiet
def test_netem_loss_holds_back_rto(run_proxy, echo_port):
    """loss=0.1: about 10 % of chunks are held back one RTO (20 ms), and every hold the proxy
    counted shows up in the round-trip times (host noise can only add delay, never remove it).

    Needs quiet: others taking less than 30% of a CPU while the 300 round trips run (a stall of
    15 ms or more reads as a hold); a fresh proxy is sampled again (quiet_kit), then the test
    fails with the readings."""

    def sample() -> tuple[list[float], dict]:
        p = run_proxy(echo_port, "--delay", "1ms", "--loss", "0.1", "--rto", "20ms", "--seed", "5")
        return echo_rtt_samples("127.0.0.1", p.port, samples=300, warmup=0), p.live_stats()

    rtts, st = quiet_kit.quietly(sample, "300 round trips through a lossy proxy")
    counted = st["held_up"] + st["held_down"]
    chunks = st["chunks_up"] + st["chunks_down"]
    assert chunks == 600
    assert 0.06 < counted / chunks < 0.14, st
    holds = [int((r - 2.0 + 5.0) // 20.0) for r in rtts]  # 15..35 ms extra -> 1 hold, ...
    assert sum(holds) >= counted - 2, (sum(holds), counted)
    assert sum(holds) <= counted + 0.05 * len(rtts), (sum(holds), counted)
    one_hold = [r for r, h in zip(rtts, holds) if h == 1]
    assert 20.0 < _p50(one_hold) < 24.5, _p50(one_hold)  # the RTO is visible


@pytest.mark.needs_quiet
def test_netem_bandwidth_bulk(run_proxy, echo_port):
    """Needs quiet: others taking less than 30% of a CPU while 1.25 MB go through the 20 mbit/s
    link (the proxy's pacing thread must run on time); sent again (quiet_kit), then the test
    fails with the readings."""
    p = run_proxy(echo_port, "--bandwidth", "20mbit")
    bps = quiet_kit.quietly(
        lambda: echo_throughput_bps("127.0.0.1", p.port, nbytes=1_250_000),
        "a bulk transfer through a 20 mbit/s proxy",
    )
    assert abs(bps / 20e6 - 1.0) < 0.10, bps


def test_netem_bandwidth_is_aggregate_per_direction(run_proxy, echo_port):
    """Two connections at once share one 16 mbit/s link per direction (like one tbf qdisc):
    together they move bytes at 16 mbit/s, not 2 x 16."""
    p = run_proxy(echo_port, "--bandwidth", "16mbit")
    out = []
    nbytes = 700_000

    def one():
        out.append(echo_throughput_bps("127.0.0.1", p.port, nbytes=nbytes))

    ts = [threading.Thread(target=one) for _ in range(2)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    elapsed = time.perf_counter() - t0
    assert len(out) == 2
    aggregate = 2 * nbytes * 8 / elapsed
    assert 12e6 < aggregate < 17.6e6, (aggregate, out)


def test_netem_thousands_of_connections(run_proxy, echo_port):
    n = 2000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < n + 200:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {n + 200}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 3 * n)), hard))
    p = run_proxy(echo_port, "--delay", "20ms")

    async def main():
        sem = asyncio.Semaphore(500)  # bound connect bursts, all stay open together
        opened = []

        async def conn(i):
            async with sem:
                r, w = await asyncio.open_connection("127.0.0.1", p.port)
            opened.append(w)
            msg = f"conn-{i:05d}\n".encode()
            w.write(msg)
            await w.drain()
            got = await r.readexactly(len(msg))
            assert got == msg
            return r, w

        pairs = await asyncio.wait_for(asyncio.gather(*(conn(i) for i in range(n))), 60)
        stats_open = p.live_stats()
        for _, w in pairs:
            w.close()
        return stats_open

    st = asyncio.run(main())
    assert st["conns"] == n
    assert st["conns_peak"] >= n * 0.9, st
    # all closed again (FIN both ways)
    wait_for(lambda: p.live_stats()["conns_open"] == 0, "every proxied connection closing")


def test_netem_half_close_propagates(run_proxy, echo_port):
    p = run_proxy(echo_port, "--delay", "2ms")
    s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
    s.sendall(b"x" * 100_000)
    s.shutdown(socket.SHUT_WR)  # client FIN -> server sees EOF -> server closes
    got = bytearray()
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    assert bytes(got) == b"x" * 100_000  # all data first, then the FIN
    s.close()


def _one_shot_server(action: str):
    """A server that accepts one connection and does `action`; returns (port, thread, result).
    result["received"] is set once the first bytes came in."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    result = {"received": threading.Event()}

    def serve():
        ls.settimeout(10)
        c, _ = ls.accept()
        c.settimeout(10)
        try:
            if action == "reset":
                c.recv(10)
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.close()
            else:  # observe what the client does
                try:
                    while c.recv(4096):
                        result["received"].set()
                    result["outcome"] = "eof"
                except ConnectionResetError:
                    result["outcome"] = "reset"
                c.close()
        finally:
            ls.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return ls.getsockname()[1], t, result


def test_netem_reset_server_to_client(run_proxy):
    port, t, _ = _one_shot_server("reset")
    p = run_proxy(port, "--delay", "2ms")
    s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
    s.sendall(b"hi")
    with pytest.raises(ConnectionResetError):
        while s.recv(10):
            pass
    t.join(5)
    s.close()


def test_netem_reset_client_to_server(run_proxy):
    port, t, result = _one_shot_server("observe")
    p = run_proxy(port, "--delay", "2ms")
    s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
    s.sendall(b"hi")
    # the reset must follow the bytes over an open upstream connection: wait until they are in
    assert result["received"].wait(5), "the server never got the bytes through the proxy"
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    t.join(5)
    assert result.get("outcome") == "reset"


def test_netem_refused_upstream_resets_client(run_proxy):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    dead_port = ls.getsockname()[1]
    ls.close()
    p = run_proxy(dead_port)
    s = socket.socket()
    s.settimeout(5)
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        # the reset can beat connect() back to a client that was not scheduled in between
        s.connect(("127.0.0.1", p.port))
        s.sendall(b"x")
        while s.recv(10):
            pass
        raise ConnectionResetError("EOF instead of reset")  # pragma: no cover
    s.close()
    assert p.live_stats()["refused"] == 1


def test_netem_backpressure_bounds_memory(run_proxy):
    """A server that never reads: the proxy stops reading the client instead of buffering it."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    p = run_proxy(ls.getsockname()[1], "--delay", "1ms", "--queue-limit", "1048576")
    s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
    srv, _ = ls.accept()  # accepted, never read
    s.setblocking(False)
    sent = 0
    block = b"z" * 65536
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sent < 64 << 20:
        try:
            sent += s.send(block)
        except BlockingIOError:
            time.sleep(0.01)
            try:
                sent += s.send(block)
            except BlockingIOError:
                break
    st = p.live_stats()
    rss_kb = int(
        [line for line in open(f"/proc/{p.proc.pid}/status") if line.startswith("VmRSS")][
            0
        ].split()[1]
    )
    assert sent < 40 << 20, sent  # the sender got blocked
    assert st["bytes_up"] < 8 << 20, st  # the proxy stopped reading near its limit
    assert rss_kb < 32 * 1024, rss_kb
    s.close()
    srv.close()
    ls.close()
