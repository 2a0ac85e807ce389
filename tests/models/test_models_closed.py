"""Exact MVA against a brute-force continuous-time Markov chain of the same closed network,
the asymptotic bounds, input validation, and Seidmann's multi-server approximation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from models import closed


def ctmc_cycle(demands, servers, users, think_time):
    """Brute force: N customers cycle think -> station 1 -> ... -> station K -> think, each
    station exponential with mean demand D_k and servers[k] servers (np.inf = delay station).
    Builds the full generator, solves pi Q = 0 and returns (X, R, Q_k)."""
    mean = [think_time] + list(demands)  # station 0 = think (infinite server)
    cap = [np.inf] + list(servers)
    if think_time == 0:  # a zero-time station is simply left out
        mean, cap = mean[1:], cap[1:]
    K = len(mean) - 1
    states = [s for s in itertools.product(range(users + 1), repeat=K + 1) if sum(s) == users]
    index = {s: i for i, s in enumerate(states)}
    Q = np.zeros((len(states), len(states)))
    for s, i in index.items():
        for j in range(K + 1):
            if s[j] == 0 or mean[j] == 0:
                continue
            rate = min(s[j], cap[j]) / mean[j]
            t = list(s)
            t[j] -= 1
            t[(j + 1) % (K + 1)] += 1
            Q[i, index[tuple(t)]] += rate
            Q[i, i] -= rate
    A = np.vstack([Q.T, np.ones(len(states))])
    b = np.zeros(len(states) + 1)
    b[-1] = 1.0
    pi = np.linalg.lstsq(A, b, rcond=None)[0]
    S = np.array(states, dtype=float)
    last = K  # completions of the last station feed the think station
    x = float(sum(p * min(s[last], cap[last]) / mean[last] for p, s in zip(pi, states)))
    qk = pi @ S[:, 1:] if think_time > 0 else pi @ S
    return x, users / x - think_time, qk


@pytest.mark.parametrize(
    "demands,delay,think",
    [
        ([0.2, 0.3, 0.1], [], 1.0),
        ([0.5, 0.05, 0.25, 0.4], [3], 0.0),  # station 3 is a delay station
        ([1.0], [], 2.0),
    ],
)
def test_mva_matches_ctmc(demands, delay, think):
    N = 6
    res = closed.mva(demands, N, think, delay_stations=delay or None)
    servers = [np.inf if k in delay else 1 for k in range(len(demands))]
    for n in range(1, N + 1):
        x, r, q = ctmc_cycle(demands, servers, n, think)
        assert res.throughput[n - 1] == pytest.approx(x, rel=1e-9)
        assert res.response_time[n - 1] == pytest.approx(r, rel=1e-9)
        np.testing.assert_allclose(res.queue_lengths[n - 1], q, rtol=1e-8, atol=1e-12)


def test_mva_shapes_bounds_and_laws():
    d, N, Z = np.array([2.0, 3.0, 1.0]), 30, 4.0
    r = closed.mva(d, N, Z)
    assert r.queue_lengths.shape == r.utilization.shape == (N, 3)
    assert r.users.tolist() == list(range(1, N + 1))
    assert np.all(r.throughput <= r.bound_throughput + 1e-12)
    assert np.all(r.response_time >= r.bound_response_time - 1e-12)
    assert r.n_star == pytest.approx((6.0 + 4.0) / 3.0)
    np.testing.assert_allclose(r.bound_throughput, np.minimum(r.users / 10.0, 1 / 3.0))
    np.testing.assert_allclose(r.bound_response_time, np.maximum(6.0, r.users * 3.0 - 4.0))
    # Little's law over the whole cycle and the utilisation law at each station
    np.testing.assert_allclose(r.queue_lengths.sum(axis=1) + r.throughput * Z, r.users)
    np.testing.assert_allclose(r.utilization, r.throughput[:, None] * d[None, :])
    assert r.utilization[-1, 1] == pytest.approx(1.0, abs=1e-3)  # bottleneck saturates
    assert r.at(5)["response_time"] == pytest.approx(r.response_time[4])


def test_mva_bad_inputs():
    with pytest.raises(ValueError, match="users"):
        closed.mva([1.0], 0)
    with pytest.raises(ValueError, match="users"):
        closed.mva([1.0], 2.5)
    with pytest.raises(ValueError, match="demands"):
        closed.mva([1.0, -0.1], 3)
    with pytest.raises(ValueError, match="demands"):
        closed.mva([], 3)
    with pytest.raises(ValueError, match="think_time"):
        closed.mva([1.0], 3, think_time=-1)
    with pytest.raises(ValueError, match="delay_stations"):
        closed.mva([1.0, 2.0], 3, delay_stations=[5])


def test_mva_does_not_freeze_callers_array():
    d = np.array([1.0, 2.0])
    closed.mva(d, 3)
    d[0] = 5.0  # still writable


@pytest.mark.parametrize("c,Z", [(2, 1.0), (4, 2.0), (3, 0.0)])
def test_multiserver_mva_matches_ctmc(c, Z):
    demands, servers = [1.0, 0.3, 0.2], [c, 1, np.inf]
    res = closed.mva(demands, 8, Z, delay_stations=[2], servers=[c, 1, 1])
    for n in range(1, 9):
        x, r, q = ctmc_cycle(demands, servers, n, Z)
        assert res.throughput[n - 1] == pytest.approx(x, rel=1e-9)
        assert res.response_time[n - 1] == pytest.approx(r, rel=1e-9)
        np.testing.assert_allclose(res.queue_lengths[n - 1], q, rtol=1e-8, atol=1e-12)
    assert res.utilization[-1, 0] == pytest.approx(res.throughput[-1] * 1.0 / c)


def test_convolution_path_equals_mva_recursion():
    d, delay = np.array([0.2, 0.3, 0.1, 0.5]), np.array([False, False, False, True])
    x1, r1, rk1, q1 = closed._mva_recursion(d, delay, 40, 1.5)
    x2, q2 = closed._convolution(d, np.ones(4, dtype=int), delay, 40, 1.5)
    np.testing.assert_allclose(x2, x1, rtol=1e-10)
    np.testing.assert_allclose(q2, q1, rtol=1e-9, atol=1e-12)


def test_multiserver_is_stable_for_large_c_and_population():
    # the load-dependent MVA recursion breaks down here; the log-space convolution does not
    r = closed.mva([0.01], 1500, 0.0, servers=[512])
    np.testing.assert_allclose(r.throughput[:512], np.arange(1, 513) / 0.01, rtol=1e-9)
    np.testing.assert_allclose(r.throughput[512:], 512 / 0.01, rtol=1e-9)
    assert r.bound_throughput[-1] == pytest.approx(51200.0) and r.n_star == pytest.approx(512)
    with pytest.raises(ValueError, match="servers"):
        closed.mva([0.01], 3, servers=[0])
