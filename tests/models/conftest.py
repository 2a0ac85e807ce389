"""Shared Ciw discrete-event simulation helpers for the models tests (Ciw 3.2.7).

Simulations are cached per session so several tests can share one run. Every run uses fixed
seeds; the first 10 % of simulated time is dropped as warm-up and the last 5 % as cool-down
(customers arriving then may not have finished)."""

from __future__ import annotations

import functools

import ciw
import numpy as np
import pytest

SEEDS = (11, 23, 37)


@functools.cache
def _simulate(
    arrival_rate: float,
    service: tuple,
    servers: int,
    queue_capacity: float,
    customers_per_seed: int,
    seeds: tuple = SEEDS,
) -> dict:
    kind, *args = service
    args = [list(a) if isinstance(a, tuple) else a for a in args]
    horizon = customers_per_seed / arrival_rate
    resp, wait, accepted, rejected = [], [], 0, 0
    for seed in seeds:
        dist = getattr(ciw.dists, kind)(*args)
        net = ciw.create_network(
            arrival_distributions=[ciw.dists.Exponential(arrival_rate)],
            service_distributions=[dist],
            number_of_servers=[servers],
            queue_capacities=[queue_capacity],
        )
        ciw.seed(seed)
        sim = ciw.Simulation(net)
        sim.simulate_until_max_time(horizon)
        lo, hi = 0.10 * horizon, 0.95 * horizon
        for r in sim.get_all_records():
            if not lo <= r.arrival_date < hi:
                continue
            if r.record_type == "rejection":
                rejected += 1
            else:
                accepted += 1
                resp.append(r.exit_date - r.arrival_date)
                wait.append(r.waiting_time)
    return {
        "response": np.asarray(resp),
        "wait": np.asarray(wait),
        "p_block": rejected / max(accepted + rejected, 1),
        "accepted": accepted,
    }


@pytest.fixture(scope="session")
def simulate():
    """simulate(arrival_rate, service=('Exponential', mu), servers=1, queue_capacity=inf,
    customers_per_seed=...) -> dict(response, wait, p_block, accepted), pooled over SEEDS."""

    def run(
        arrival_rate, service, servers=1, queue_capacity=float("inf"), customers_per_seed=40_000
    ):
        return _simulate(
            float(arrival_rate),
            tuple(service),
            int(servers),
            queue_capacity,
            int(customers_per_seed),
        )

    return run


@functools.cache
def _simulate_ps(
    arrival_rate: float, service_rate: float, cores: int, threads: float, customers: int, seeds
) -> np.ndarray:
    resp = []
    for seed in seeds:
        net = ciw.create_network(
            arrival_distributions=[ciw.dists.Exponential(arrival_rate)],
            service_distributions=[ciw.dists.Exponential(service_rate)],
            number_of_servers=[threads],
            ps_thresholds=[cores],
        )
        ciw.seed(seed)
        sim = ciw.Simulation(net, node_class=ciw.PSNode)
        horizon = customers / arrival_rate
        sim.simulate_until_max_time(horizon)
        lo, hi = 0.10 * horizon, 0.95 * horizon
        resp += [
            r.exit_date - r.arrival_date for r in sim.get_all_records() if lo <= r.arrival_date < hi
        ]
    return np.asarray(resp)


@pytest.fixture(scope="session")
def simulate_ps():
    """simulate_ps(arrival_rate, service_rate, cores, threads, customers_per_seed, seeds) ->
    response times of Ciw's limited processor sharing node (PSNode: up to `threads` customers
    share `cores` servers' worth of service evenly; the rest wait FIFO), pooled over seeds."""

    def run(arrival_rate, service_rate, cores, threads, customers_per_seed=25_000, seeds=SEEDS[:2]):
        return _simulate_ps(
            float(arrival_rate),
            float(service_rate),
            int(cores),
            threads,
            int(customers_per_seed),
            tuple(seeds),
        )

    return run
