"""perfctl-proxy's realism features, measured from outside: bursty (Gilbert-Elliott) loss,
reordering, correlated jitter, resets and black holes. One-way delays come from owd_kit's sink
(the sender's clock; each message sent on an idle path, so its delay is its own)."""

from __future__ import annotations

import os
import socket
import threading

import numpy as np
import pytest
import quiet_kit
from owd_kit import Sink, one_way_ms, one_way_ms_pair, runs_of

from orchestrator.experiment.network import GilbertElliott
from orchestrator.netem.probe import echo_rtt_samples

LOSS_DELAY_MS, LOSS_RTO_MS = 1.0, 12.0
# a held chunk arrives no sooner than delay + rto (the proxy never releases early); a chunk
# not held is taken for a lost one only if the host delays it by about an rto
LOST_OVER_MS = LOSS_DELAY_MS + LOSS_RTO_MS - 0.5


def _lossy_path(run_proxy, n: int, *loss_flags: str) -> dict:
    """n frames, 14.5 ms apart, through a lossy proxy (delay 1 ms, rto 12 ms, loss_flags) and,
    alternately, through a plain one (delay 1 ms): which frames the lossy path held back,
    how many the proxy says it held, and how many of the plain path's frames this host
    delayed past LOST_OVER_MS on its own (each such stall on the lossy path would be taken
    for a loss)."""
    plain, lossy = Sink(), Sink()
    a = run_proxy(plain.port, "--delay", "1ms", "--threads", "1")
    b = run_proxy(lossy.port, "--delay", "1ms", "--rto", "12ms", "--threads", "1",
                  "--seed", "11", *loss_flags)  # fmt: skip
    own, owd = one_way_ms_pair((a.port, plain), (b.port, lossy), n, 0.0145)
    plain.close()
    lossy.close()
    return {
        "lost": owd > LOST_OVER_MS,
        "held_up": b.live_stats()["held_up"],
        "host_stalls": int((own > LOST_OVER_MS).sum()),
    }


def _quiet_lossy_path(run_proxy, n: int, *loss_flags: str) -> dict:
    """_lossy_path, taken again (quiet_kit) while this host stalled more than 1% of the plain
    path's frames by an rto; then the test fails with each run's readings."""

    def spoiled(run: dict) -> str | None:
        if run["host_stalls"] <= 0.01 * n:
            return None
        return (
            f"{run['host_stalls']} of {n} plain-path frames later than {LOST_OVER_MS} ms "
            f"(held_up {run['held_up']}, lost {int(run['lost'].sum())})"
        )

    return quiet_kit.until_quiet(
        lambda attempt: _lossy_path(run_proxy, n, *loss_flags),
        spoiled,
        "a plain path whose frames this host delays by an rto at most 1% of the time",
    )


@pytest.mark.needs_quiet
def test_netem_gilbert_elliott_loss_rate_and_bursts(run_proxy):
    """Lost chunks (held one rto) come in bursts whose rate and mean length match the chain;
    independent loss at the same rate does not burst. A frame counts as lost when it arrives
    later than delay + rto - 0.5 ms: a held one never arrives sooner.

    Needs quiet: this host delaying at most 1% of the frames of a plain path sent alongside
    by an rto (each such stall on the lossy path looks like a loss); a run with more is taken
    again (quiet_kit), then the test fails with the readings. The proxy's own count
    of held chunks may differ from the frames seen late by those stalls, and 3%."""
    ge = GilbertElliott(p=0.05, r=0.3, loss_bad=0.9, loss_good=0.01)
    n = 500
    run = _quiet_lossy_path(run_proxy, n, "--gemodel", "0.05,0.3,0.9,0.01")
    lost = run["lost"]
    rate, bursts = lost.mean(), runs_of(lost)
    assert rate == pytest.approx(ge.loss_rate(), rel=0.4), (rate, ge.loss_rate())
    assert np.mean(bursts) == pytest.approx(ge.mean_burst(), rel=0.5), (
        np.mean(bursts),
        ge.mean_burst(),
    )
    # the proxy's own count agrees
    assert abs(run["held_up"] - int(lost.sum())) <= 0.03 * n + run["host_stalls"], run


@pytest.mark.needs_quiet
def test_netem_independent_loss_does_not_burst(run_proxy):
    """Needs quiet: as test_netem_gilbert_elliott_loss_rate_and_bursts (at most 1% of a plain
    path's frames delayed by an rto)."""
    lost = _quiet_lossy_path(run_proxy, 400, "--loss", "0.15")["lost"]
    assert lost.mean() == pytest.approx(0.15, rel=0.4)
    assert np.mean(runs_of(lost)) < 1.5  # 1 / (1 - 0.15) = 1.18 expected


QUIET_SPREAD_MS = 0.5  # this host's own one-way delay spread must stay under a third of 1.5 ms


def _spread_ms(owd: np.ndarray) -> float:
    """The spread of one-way delays as a normal law's sigma, from the IQR (robust to a few
    host stalls of several ms)."""
    q75, q25 = np.percentile(owd, [75, 25])
    return float((q75 - q25) / 1.349)


def _jitter_laws(run_proxy) -> dict[str, dict[str, float]]:
    """For jitter-correlation 0 and 0.9 (1.5 ms of normal jitter on a 6 ms path): the rank
    correlation of consecutive delays, their spread (ms), and the spread of a path without
    jitter measured at the same time (frames sent alternately to both): this host's own."""
    from scipy import stats

    def proxy(sink, *flags):
        return run_proxy(sink.port, "--delay", "6ms", *flags, "--threads", "1", "--seed", "5")

    results = {}
    for corr in ("0", "0.9"):
        plain, jittered = Sink(), Sink()
        a = proxy(plain)
        b = proxy(jittered, "--jitter", "1.5ms", "--distribution", "normal",
                  "--jitter-correlation", corr)  # fmt: skip
        own, owd = one_way_ms_pair((a.port, plain), (b.port, jittered), 250, 0.014)
        plain.close()
        jittered.close()
        results[corr] = {
            "rank_correlation": float(stats.spearmanr(owd[:-1], owd[1:])[0]),
            "spread_ms": _spread_ms(owd),
            "own_spread_ms": _spread_ms(own),
            # how late the jittered proxy itself released (its timer on this host)
            "release_late_p50_ms": b.live_stats()["release_err_p50_ns"] / 1e6,
        }
    return results


@pytest.mark.needs_quiet
def test_netem_correlated_jitter_keeps_its_law(run_proxy):
    """jitter-correlation 0.9: consecutive delays correlate, the marginal stays N(d, j).
    Rank correlation and the IQR, so a few host stalls of several ms do not decide it; with
    rho 0.9 the 250 draws are worth ~13 independent ones, hence the wider bar there. The
    spread expected is the law's 1.5 ms together with this host's own, measured at the same
    time through a path without jitter: sqrt(1.5^2 + own^2).

    Needs quiet: this host's own spread of one-way delays (the path without jitter, beside
    each setting) and the jittered proxy's median release lateness both under QUIET_SPREAD_MS, a
    third of the law checked; a noisier run is taken again (quiet_kit), then the
    test fails with every run's readings."""

    def spoiled(results: dict) -> str | None:
        if all(
            r["own_spread_ms"] <= QUIET_SPREAD_MS and r["release_late_p50_ms"] <= QUIET_SPREAD_MS
            for r in results.values()
        ):
            return None
        return f"own spread or release lateness above {QUIET_SPREAD_MS} ms: {results}"

    results = quiet_kit.until_quiet(
        lambda attempt: _jitter_laws(run_proxy),
        spoiled,
        f"a one-way delay spread and a release lateness under {QUIET_SPREAD_MS} ms",
    )
    flat, corr = results["0"], results["0.9"]
    assert corr["rank_correlation"] > 0.5, results
    assert flat["rank_correlation"] < 0.3, results
    expected = {k: float(np.hypot(1.5, r["own_spread_ms"])) for k, r in results.items()}
    assert flat["spread_ms"] == pytest.approx(expected["0"], rel=0.3), (expected, results)
    assert corr["spread_ms"] == pytest.approx(expected["0.9"], rel=0.5), (expected, results)


def test_netem_reorder_skips_the_delay_but_keeps_byte_order(run_proxy, sink, echo_port):
    p = run_proxy(sink.port, "--delay", "20ms", "--reorder", "0.5", "--threads", "1", "--seed", "2")
    owd = one_way_ms(p.port, sink, 60, 0.03)
    early = owd < 10
    assert 0.25 < early.mean() < 0.75, owd
    assert abs(p.live_stats()["reordered_up"] - int(early.sum())) <= 1
    # back to back: chosen chunks may not overtake, the stream arrives intact
    q = run_proxy(echo_port, "--delay", "3ms", "--reorder", "0.5", "--seed", "3")
    payload = os.urandom(200_000)
    with socket.create_connection(("127.0.0.1", q.port), timeout=10) as s:
        got = bytearray()

        def read():
            while len(got) < len(payload):
                b = s.recv(65536)
                if not b:
                    return
                got.extend(b)

        t = threading.Thread(target=read)
        t.start()
        for i in range(0, len(payload), 1000):
            s.sendall(payload[i : i + 1000])
        t.join(20)
    assert bytes(got) == payload


def test_netem_reset_fault_resets_both_ends(run_proxy, echo_port):
    p = run_proxy(echo_port, "--reset", "1", echo=True)
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        s.sendall(b"hello")
        with pytest.raises(ConnectionResetError):
            if s.recv(16) == b"":
                raise AssertionError("closed cleanly instead of a reset")
    # the probe's echo path is never faulted
    assert len(echo_rtt_samples("127.0.0.1", p.echo_port, samples=5)) == 5
    assert p.live_stats()["injected_resets"] == 1


def test_netem_blackhole_fault_swallows_silently(run_proxy, echo_port):
    p = run_proxy(echo_port, "--blackhole", "1")
    with socket.create_connection(("127.0.0.1", p.port), timeout=0.5) as s:
        s.sendall(b"hello")
        with pytest.raises(socket.timeout):
            s.recv(16)  # no answer, no FIN, no RST: the connection just hangs
        s.sendall(b"more")  # still writable: nothing told the client
    st = p.live_stats()
    assert st["blackholed"] == 1 and st["conns"] == 1
