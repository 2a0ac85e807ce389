"""Each dispatch discipline's station (models/stations.py) against a simulation of that
discipline: limited processor sharing against Ciw's PSNode; connections pinned to workers, the
queue in the client, event loops owning their connections and closed loops against the
discrete-event simulation in des.py (a single seed of ~60 000 requests each, so tolerances are
a few per cent: the simulation's own noise at these loads)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models import queues, sharing
from models.stations import Station

from .des import simulate

# untimed: simulations with fixed seeds: what they compute, not how fast (tests/conftest.py)
pytestmark = pytest.mark.untimed

S = 0.004  # mean service time [s]


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def test_processor_sharing_on_fewer_cores_matches_ciw_in_mean_and_tail(simulate_ps):
    # 8 threads sharing 2 cores at rho = 0.7: the tail is longer than M/M/2 FCFS's
    sim = simulate_ps(1.4, 1.0, 2, 8)
    model = sharing.lps(1.4, 1.0, 2, 8)
    assert rel(model.mean_response, sim.mean()) < 0.03
    for q in (0.5, 0.9, 0.99):
        assert rel(model.response_percentile(q), float(np.quantile(sim, q))) < 0.05
    fcfs = queues.mmc(1.4, 1.0, 2).response_percentile(0.99)
    assert model.response_percentile(0.99) > 1.1 * fcfs  # sharing stretches the tail


@pytest.mark.usefixtures("live")
@pytest.mark.parametrize("cores,threads,rate", [(2, math.inf, 1.4), (1, 4, 0.7)])
def test_processor_sharing_without_a_thread_limit_and_on_one_core_match_ciw(
    simulate_ps, cores, threads, rate
):
    sim = simulate_ps(rate, 1.0, cores, threads, 40_000, (11, 23, 37))
    model = sharing.lps(rate, 1.0, cores, threads)
    assert rel(model.mean_response, sim.mean()) < 0.03
    assert rel(model.response_percentile(0.99), float(np.quantile(sim, 0.99))) < 0.06


def test_a_processor_sharing_station_uses_the_sharing_model_only_past_the_cores():
    ps = Station("processor_sharing", 8, S, cores=2)
    assert ps.name == "M/M/2-PS (8 threads)" and ps.max_rate() == pytest.approx(2 / S)
    assert ps.latency_s(300, "mean") == pytest.approx(queues.mmc(300, 1 / S, 2).mean_response)
    assert ps.latency_s(300, "p99") == pytest.approx(
        sharing.lps(300, 1 / S, 2, 8).response_percentile(0.99)
    )
    # two keep-alive connections: never more than two requests share the two cores
    few = Station("processor_sharing", 8, S, cores=2, connections=2)
    assert few.name == "M/M/2" and few.latency_s(300, "p99") == pytest.approx(
        queues.mmc(300, 1 / S, 2).response_percentile(0.99)
    )


def test_a_shared_queue_behind_many_keepalive_connections_is_mmc_plus_the_overhead():
    sim = simulate("shared", 4, S, rate_rps=700, connections=64, overhead_s=0.0005, requests=60_000)
    st = Station("shared_queue", 4, S, overhead_s=0.0005, connections=64)
    assert st.name == "M/M/4"
    assert rel(st.latency_s(700, "mean"), sim.mean) < 0.04
    assert rel(st.latency_s(700, "p99"), sim.percentile(99)) < 0.06


def test_connections_pinned_to_as_many_workers_queue_in_the_client_for_service_plus_round_trip():
    sim = simulate("pinned", 4, S, rate_rps=600, connections=4, overhead_s=0.001, requests=60_000)
    st = Station("per_connection", 4, S, overhead_s=0.001, connections=4)
    assert "queue in the client" in st.name and st.broken is None
    assert st.max_rate() == pytest.approx(4 / (S + 0.001))
    assert rel(st.latency_s(600, "mean"), sim.mean) < 0.04
    # the server-side model (M/M/4 plus the overhead outside it) misses the serialised round
    # trip: it is several times further off
    server_side = queues.mmc(600, 1 / S, 4).mean_response + 0.001
    assert abs(server_side - sim.mean) > 3 * abs(st.latency_s(600, "mean") - sim.mean)


def test_a_worker_per_connection_with_new_connections_is_the_accept_queue_mmc():
    sim = simulate("pinned", 4, S, rate_rps=700, connections=None, requests=60_000)
    st = Station("per_connection", 4, S)
    assert st.name == "M/M/4" and st.broken is None
    assert rel(st.latency_s(700, "mean"), sim.mean) < 0.04
    assert rel(st.latency_s(700, "p99"), sim.percentile(99)) < 0.06


def test_more_keepalive_connections_than_workers_starve_and_the_station_says_its_model_is_broken():
    sim = simulate("pinned", 4, S, rate_rps=500, connections=8, requests=20_000)
    assert sim.unanswered == 4  # each starved connection holds one request for ever
    st = Station("per_connection", 4, S, connections=8)
    assert st.pinned and "connection pinning" in st.broken and "4 wait" in st.broken
    closed_sim = simulate("pinned", 4, S, users=6, think_s=0.02, connections=1, requests=5_000)
    assert closed_sim.unanswered == 2  # two users never get a worker
    m = Station("per_connection", 4, S, connections=6).closed(6, 0.02)
    assert m.response_time[3] == pytest.approx(S) and math.isinf(m.response_time[5])


def test_closed_users_each_with_a_worker_of_their_own_never_queue():
    sim = simulate("pinned", 4, S, users=4, think_s=0.02, connections=1, requests=40_000)
    m = Station("per_connection", 4, S, connections=4).closed(4, 0.02)
    assert rel(m.response_time[-1], sim.mean) < 0.02


def test_closed_users_on_a_shared_queue_match_exact_multiserver_mva():
    sim = simulate("shared", 4, S, users=16, think_s=0.02, connections=1, requests=60_000)
    m = Station("shared_queue", 4, S, connections=16).closed(16, 0.02)
    assert rel(m.response_time[-1], sim.mean) < 0.03


def test_closed_users_spread_over_event_loops_match_one_mva_per_loop():
    sim = simulate("loops", 2, S, users=8, think_s=0.02, connections=1, requests=60_000)
    st = Station("event_loop", 1, S, loops=2)
    m = st.closed(8, 0.02)
    assert rel(m.response_time[-1], sim.mean) < 0.03
    one = Station("event_loop", 1, S).closed(4, 0.02)  # 8 users on 2 loops: 4 on each
    assert m.response_time[-1] == pytest.approx(one.response_time[-1])
    assert m.throughput[-1] == pytest.approx(2 * one.throughput[-1])


def test_one_event_loop_under_open_load_is_mm1():
    sim = simulate("loops", 1, S, rate_rps=150, connections=None, requests=60_000)
    st = Station("event_loop", 1, S)
    assert rel(st.latency_s(150, "mean"), sim.mean) < 0.04
    assert rel(st.latency_s(150, "p99"), sim.percentile(99)) < 0.06


def test_the_capacity_search_question_has_an_answer_for_a_processor_sharing_station():
    from models.stations import rate_for_slo

    st = Station("processor_sharing", 8, S, cores=2)
    rate = rate_for_slo(st, "p99", 0.060)
    assert 0 < rate < st.max_rate()
    assert st.latency_s(rate, "p99") == pytest.approx(0.060, rel=1e-4)
    # past what the chain can hold the percentile is infinite, never a wrong finite number
    assert sharing.lps(0.999 * 2 / S, 1 / S, 2, 8).response_percentile(0.99) == math.inf
