"""What the probe should see through a Network: the added RTT of idle request/response round
trips, simulated with a fixed seed from the same laws the proxy draws from, and how far a
Gilbert-Elliott chain's loss rate and burst length wander over a finite probe.

The probe's checks (verify.py, Injector.check) and the trial's `rtt_expected_ms` columns are
judged against these. They live here, beside the probe, and not in experiment/network.py,
which only says what to inject: the laws are the proxy's (proxy.c), so they change with it.
"""

from __future__ import annotations

import numpy as np

from ..experiment.network import GilbertElliott, Network

PARETO_SHAPE = 3.0  # `distribution: pareto`: Lomax(shape 3, scale 2*jitter), mean = jitter


def added_rtt_samples_ms(net: Network, n: int = 200_000, seed: int = 12345) -> np.ndarray:
    """Simulated added RTT of n independent request/response round trips on an idle path
    (fixed seed): each direction's delay + jitter (clamped), 0 if reordered, + rto if
    lost. What the probe's samples are checked against."""
    rng = np.random.default_rng(seed)
    total = np.zeros(n)
    for d in net.direction_delays_ms():
        one = np.maximum(0.0, d + jitter_samples_ms(rng, n, net.jitter_ms, net.distribution))
        if net.reorder:
            one = np.where(reorder_draws(rng, n, net.reorder_correlation) < net.reorder, 0.0, one)
        if net.has_loss:
            one = one + net.rto_ms * (rng.random(n) < net.loss_per_chunk)
        total += one
    return total


def expected_rtt_p50_ms(net: Network) -> float:
    """Median added RTT of one request/response round trip: what probe p50 is checked
    against. Exact without jitter, loss and reordering; otherwise from a fixed-seed
    simulation (added_rtt_samples_ms)."""
    up, down = net.direction_delays_ms()
    if not net.jitter_ms and not net.has_loss and not net.reorder:
        return up + down
    return float(np.median(added_rtt_samples_ms(net)))


def loss_sampling_interval(
    chain: GilbertElliott, n: int, level: float = 0.99, reps: int = 4000, seed: int = 0
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Central `level` intervals of the loss rate and of the mean burst length that `n`
    chunks of this chain show, from `reps` simulated runs (started in the stationary law).
    A bursty chain's estimates converge slowly (n=3000 with p=2%, r=25% has ~55 bad
    spells, a ~20% relative spread of the rate), so a measurement is judged against this
    interval, not against the long-run value with a fixed tolerance."""
    rng = np.random.default_rng(seed)
    bad = rng.random(reps) < chain.bad_share
    lost = np.empty((n, reps), bool)
    for i in range(n):
        u = rng.random(reps)
        bad = np.where(bad, u >= chain.r, u < chain.p)
        lost[i] = rng.random(reps) < np.where(bad, chain.loss_bad, chain.loss_good)
    rate = lost.mean(axis=0)
    starts = lost[0].astype(int) + (lost[1:] & ~lost[:-1]).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        burst = np.where(starts > 0, lost.sum(axis=0) / np.maximum(starts, 1), np.nan)
    a = (1 - level) / 2
    burst = burst[~np.isnan(burst)]
    return (
        (float(np.quantile(rate, a)), float(np.quantile(rate, 1 - a))),
        (float(np.quantile(burst, a)), float(np.quantile(burst, 1 - a))),
    )


def reorder_draws(rng: np.random.Generator, n: int, correlation: float) -> np.ndarray:
    """netem's correlated uniforms, as the proxy draws them: u'_k = (1-c) u_k + c u'_(k-1)."""
    u = rng.random(n)
    if not correlation:
        return u
    from scipy.signal import lfilter  # here: scipy.signal is slow to import and rarely needed

    return lfilter([1.0 - correlation], [1.0, -correlation], u)


def jitter_samples_ms(
    rng: np.random.Generator, n: int, jitter: float, distribution: str
) -> np.ndarray:
    """Draws of one direction's jitter term (before the clamp), same law as the proxy."""
    if not jitter:
        return np.zeros(n)
    if distribution == "normal":
        return rng.normal(0.0, jitter, n)
    if distribution == "pareto":
        a = PARETO_SHAPE
        return np.minimum((a - 1.0) * jitter * (rng.random(n) ** (-1.0 / a) - 1.0), 1000.0 * jitter)
    return rng.uniform(-jitter, jitter, n)
