"""Input validation, numerical stability and internal consistency of models.queues."""

from __future__ import annotations

import dataclasses
import math

import pytest

from models import queues


@pytest.mark.parametrize(
    "call",
    [
        lambda: queues.mm1(1.0, 1.0),
        lambda: queues.mm1(2.0, 1.0),
        lambda: queues.mmc(3.0, 1.0, 3),
        lambda: queues.mg1(1.0, 1.0, 0.5),
        lambda: queues.mgc(4.0, 1.0, 4, 0.5),
        lambda: queues.mmck(5.0, 1.0, 2, math.inf),
    ],
)
def test_unstable_inputs_raise(call):
    with pytest.raises(ValueError, match="unstable"):
        call()


@pytest.mark.parametrize(
    "call,word",
    [
        (lambda: queues.mm1(0.0, 1.0), "arrival_rate"),
        (lambda: queues.mm1(-1.0, 1.0), "arrival_rate"),
        (lambda: queues.mm1(1.0, 0.0), "service_rate"),
        (lambda: queues.mmc(1.0, float("nan"), 2), "service_rate"),
        (lambda: queues.mmc(1.0, 2.0, 0), "servers"),
        (lambda: queues.mmc(1.0, 2.0, 1.5), "servers"),
        (lambda: queues.mmck(1.0, 2.0, 3, 2), "capacity"),
        (lambda: queues.mmck(1.0, 2.0, 3, 4.5), "capacity"),
        (lambda: queues.mmck(1.0, 2.0, 0, 4), "servers"),
        (lambda: queues.mg1(0.5, -1.0, 1.0), "mean_service"),
        (lambda: queues.mg1(0.5, 1.0, -0.1), "service_scv"),
        (lambda: queues.mgc(0.5, 1.0, 2, 1.0, arrival_scv=-1), "arrival_scv"),
        (lambda: queues.mgc(0.5, 1.0, 0, 1.0), "servers"),
    ],
)
def test_bad_inputs_raise_with_name(call, word):
    with pytest.raises(ValueError, match=word):
        call()


def test_results_are_frozen():
    r = queues.mm1(1.0, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.mean_response = 0.0


def test_percentile_range_checked_and_mg_has_no_percentiles():
    with pytest.raises(ValueError):
        queues.mm1(1.0, 2.0).response_percentile(1.0)
    with pytest.raises(NotImplementedError):
        queues.mg1(0.5, 1.0, 0.0).response_percentile(0.99)
    assert queues.mmc(1.0, 1.0, 3).response_percentile(0.0) == 0.0
    assert queues.mmc(1.0, 1.0, 3).wait_percentile(0.5) == 0.0  # P(wait) < 0.5


@pytest.mark.parametrize("c", [1, 2, 50, 1000])
def test_erlang_c_large_c_is_finite_and_consistent(c):
    r = queues.mmc(0.9 * c, 1.0, c)
    assert 0.0 < r.p_wait < 1.0 and math.isfinite(r.mean_response)
    # Little's law and the utilisation law hold inside the model
    assert r.mean_queue_length == pytest.approx(r.throughput * r.mean_response)
    assert r.mean_queue_length - r.mean_queue_waiting == pytest.approx(0.9 * c)
    assert r.utilization == pytest.approx(0.9)


def test_erlang_b_c_1000_matches_direct_log_space_sum():
    # B(c, a) = (a^c / c!) / sum_k a^k / k!, evaluated independently in log space
    import numpy as np
    from scipy.special import gammaln, logsumexp

    for c, a in ((1000, 1000.0), (1000, 950.0), (300, 320.0)):
        k = np.arange(c + 1)
        logt = k * np.log(a) - gammaln(k + 1)
        assert queues.erlang_b(c, a) == pytest.approx(np.exp(logt[-1] - logsumexp(logt)), rel=1e-10)
    assert queues.erlang_b(1000, 1000.0) == pytest.approx(0.024812, abs=1e-6)
    assert queues.erlang_c(1, 0.5) == pytest.approx(0.5)


def test_mm1_is_mmc1_and_mgc_scv1_is_mmc():
    a, b = queues.mm1(3.0, 4.0), queues.mmc(3.0, 4.0, 1)
    assert a == b
    m, g = queues.mmc(5.0, 2.0, 4), queues.mgc(5.0, 0.5, 4, 1.0)
    assert g.mean_response == pytest.approx(m.mean_response, rel=1e-12)
    assert queues.mg1(3.0, 0.25, 1.0).mean_response == pytest.approx(a.mean_response, rel=1e-12)


def test_mm1_response_time_is_exponential():
    r = queues.mm1(5.0, 8.0)
    for t in (0.1, 0.5, 2.0):
        assert r.response_sf(t) == pytest.approx(math.exp(-3.0 * t), rel=1e-12)


def test_mmck_large_capacity_approaches_mmc_and_overload_is_allowed():
    big, inf = queues.mmck(9.0, 5.0, 2, 2000), queues.mmc(9.0, 5.0, 2)
    assert big.mean_response == pytest.approx(inf.mean_response, rel=1e-9)
    assert big.response_percentile(0.99) == pytest.approx(inf.response_percentile(0.99), rel=1e-6)
    assert big.wait_percentile(0.99) == pytest.approx(inf.wait_percentile(0.99), rel=1e-6)
    over = queues.mmck(20.0, 1.0, 4, 10)
    assert over.throughput < 4.0 and over.p_block > 0.5 and over.utilization < 1.0
    assert over.throughput == pytest.approx(20.0 * (1 - over.p_block))
    assert queues.mmck(1.0, 1.0, 2, math.inf) == queues.mmc(1.0, 1.0, 2)


def test_mmck_erlang_loss_and_huge_c():
    # K = c is the Erlang loss system: blocking = Erlang B, nobody waits
    r = queues.mmck(8.0, 1.0, 10, 10)
    assert r.p_block == pytest.approx(queues.erlang_b(10, 8.0), rel=1e-12)
    assert r.p_wait == 0.0 and r.mean_wait == pytest.approx(0.0, abs=1e-15)
    big = queues.mmck(900.0, 1.0, 1000, 1200)
    assert math.isfinite(big.mean_response) and big.p0 >= 0.0
    assert sum(big.probabilities) == pytest.approx(1.0, rel=1e-12)


def test_mmc_percentile_monotone_and_inverse():
    r = queues.mmc(9.0, 5.0, 4)
    qs = [r.response_percentile(p) for p in (0.1, 0.5, 0.9, 0.99, 0.999)]
    assert qs == sorted(qs)
    for p, t in zip((0.1, 0.5, 0.9, 0.99, 0.999), qs):
        assert r.response_sf(t) == pytest.approx(1 - p, rel=1e-9)
