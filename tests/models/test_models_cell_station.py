"""models/cell_station.py: a cell's configuration and readings -> the station, with every
parameter's source. The cases are the ones issue 27 found wrong (a sleep-bound server perfctl
did not write taken as CPU-bound) and the dispatch disciplines the catalogue declares."""

from __future__ import annotations

import math

import pytest

from models.cell_station import UNLIMITED_SERVERS, station_for
from models.parameters import ServiceEstimate
from models.predict import effective_servers, predict_cell

SVC = ServiceEstimate(mean_s=0.004, scv=1.0, source="server_timing", overhead_s=0.0001)


def row(**kw) -> dict:
    base = dict(load_mode="open", target_rate=300.0, server_threads=4, server_cores=1)
    return {**base, **kw}


def test_a_cmd_server_without_work_parameters_is_judged_by_its_cpu_not_assumed_cpu_bound():
    # issue 27: 4 threads, one core, 7.6% of a CPU at 300 req/s -> 0.25 ms of CPU per 4 ms
    r = row(server_impl="cmd", server_cpu_pct=7.6, throughput_rps=300.0, server_dispatch="")
    choice = station_for(r, SVC)
    assert choice.station.dispatch == "shared_queue" and choice.station.servers == 4
    assert choice.cpu_share == pytest.approx(0.076 / 300 / 0.004)
    assert "utilization law" in choice.cpu_share_source
    assert choice.dispatch_source == "assumed"
    p = predict_cell({**r, "target_rate": 850.0}, SVC)  # rho = 0.85 on 4 workers: stable
    assert p["model"] == "M/M/4" and math.isfinite(p["mean_ms"])
    # the same server at full CPU for its service: CPU-bound, one core
    busy = station_for({**r, "server_cpu_pct": 100.0, "throughput_rps": 250.0}, SVC)
    assert busy.station.dispatch == "processor_sharing" and busy.station.cores == 1


def test_cpu_bound_threads_beyond_the_cores_share_them_and_sleepers_do_not():
    spin = station_for(
        row(server_threads=8, server_cores=2, work_spin_us=4000, server_dispatch="per_connection"),
        SVC,
    )
    assert spin.station.dispatch == "processor_sharing" and spin.declared == "per_connection"
    assert (spin.station.servers, spin.station.cores) == (8, 2)
    assert effective_servers(spin) == 2
    sleep = station_for(row(server_threads=8, server_cores=2, work_sleep_us=4000), SVC)
    assert sleep.station.dispatch == "shared_queue" and sleep.station.servers == 8
    # half CPU: the cores cap the threads at cores / f = 4
    mixed = station_for(
        row(server_threads=8, server_cores=2, work_spin_us=2000, work_sleep_us=2000), SVC
    )
    assert mixed.station.servers == 4 and "capped by 2 core(s)" in mixed.servers_source
    # no parameters and no CPU reading: CPU work is assumed, and said
    bare = station_for(row(server_threads=4, server_cores=4), SVC)
    assert bare.station.servers == 4 and "assumed" in bare.cpu_share_source


def test_the_dispatch_comes_from_the_row_then_the_probe_then_an_assumption():
    declared = station_for(
        row(
            server_dispatch="per_connection", server_dispatch_source="catalogue", work_sleep_us=4000
        ),
        SVC,
    )
    assert (declared.dispatch, declared.dispatch_source) == ("per_connection", "catalogue")
    probed = station_for(
        row(
            probe_dispatch="event_loop",
            server_threads=float("nan"),
            server_cpu_pct=2.0,
            throughput_rps=300.0,
        ),
        SVC,
    )
    assert (probed.dispatch, probed.dispatch_source) == ("event_loop", "probe")
    # seen serving one at a time: its waits hold it, all of S queues (not only its CPU)
    assert probed.station.mean_service_s == pytest.approx(0.004)
    assert station_for(row(), SVC).dispatch_source == "assumed"
    with pytest.raises(ValueError, match="dispatch"):
        station_for(row(server_dispatch="round_robin"), SVC)


def test_keepalive_connections_pinned_beyond_the_workers_break_the_model():
    r = row(
        server_dispatch="per_connection",
        connections=128,
        keepalive=True,
        work_sleep_us=4000,
        target_rate=600.0,
    )
    p = predict_cell(r, SVC)
    assert p["broken"] and "connection pinning" in p["broken"] and "124 wait" in p["broken"]
    # a new connection per request: the accept queue is shared, M/M/4, with its capacity
    q = predict_cell({**r, "keepalive": False, "server_backlog": 128}, SVC)
    assert q["broken"] is None and q["model"] == "M/M/4" and q["capacity"] == 132


def test_event_loops_queue_only_what_holds_the_loop():
    # python async: spin on the loop, sleep off it (asyncio.sleep) -> a quarter of S queues
    r = row(
        concurrency_model="async",
        server_dispatch="event_loop",
        server_waits_block=False,
        work_spin_us=1000,
        work_sleep_us=3000,
    )
    st = station_for(r, SVC).station
    assert st.loops == 1 and st.mean_service_s == pytest.approx(0.001)
    assert st.overhead_s == pytest.approx(0.0001 + 0.003)
    # C epoll: every loop blocks in its sleep, one loop per thread
    e = station_for({**r, "concurrency_model": "epoll", "server_waits_block": True}, SVC).station
    assert e.loops == 4 and e.mean_service_s == pytest.approx(0.004)


def test_a_thread_per_connection_has_a_worker_for_every_request_in_flight():
    r = row(concurrency_model="thread", server_dispatch="per_connection", work_sleep_us=4000)
    unlimited = station_for({**r, "keepalive": False}, SVC).station
    assert unlimited.servers == UNLIMITED_SERVERS
    p = predict_cell({**r, "keepalive": False, "target_rate": 5000.0}, SVC)
    assert p["mean_ms"] == pytest.approx(4.0 + 0.1, rel=1e-3)  # no queue: S + overhead
    pinned = station_for({**r, "keepalive": True, "connections": 8}, SVC)
    assert pinned.station.broken is None and effective_servers(pinned) == 8


def test_processor_sharing_takes_the_cpu_demand_not_the_stretched_wall_time_of_svc():
    # two threads on one core: svc (wall time) 2 ms, but 300/s used 31% of the core
    svc = ServiceEstimate(0.002, 1.0, "server_timing", mean_se_s=0.0001)
    r = row(
        server_threads=2,
        server_cores=1,
        work_spin_us=1000,
        server_cpu_pct=31.0,
        throughput_rps=300.0,
    )
    choice = station_for(r, svc)
    assert choice.station.dispatch == "processor_sharing"
    assert choice.station.mean_service_s == pytest.approx(0.31 / 300)
    assert choice.service.source == "utilization_law"
    assert choice.service.mean_se_s == pytest.approx(0.31 / 300 * 0.05)
    # a single-user estimate timed one request alone: kept
    alone = ServiceEstimate(0.001, 1.0, "single_user_probe")
    assert station_for(r, alone).station.mean_service_s == 0.001


def test_where_server_timing_cannot_see_the_queue_the_overhead_is_a_request_that_waited_nowhere():
    # the overhead measured (latency - svc - queue) holds the client's wait for a keep-alive
    # connection: median 3 ms, but a request that waited nowhere took 0.1 ms outside
    svc = ServiceEstimate(
        0.004,
        1.0,
        "server_timing",
        overhead_s=0.003,
        overhead_mean_s=0.006,
        overhead_floor_s=0.0001,
    )
    pinned = station_for(
        row(server_dispatch="per_connection", connections=2, keepalive=True, work_sleep_us=4000),
        svc,
    ).station
    assert pinned.queue_in_client() and pinned.overhead_s == pinned.overhead_mean_s == 0.0001
    # C epoll blocks in its sleeps: requests wait unread, outside Server-Timing's queue
    loop = station_for(
        row(
            server_dispatch="event_loop",
            server_waits_block=True,
            concurrency_model="epoll",
            server_threads=1,
            work_sleep_us=4000,
        ),
        svc,
    )
    assert loop.station.overhead_s == 0.0001
    # a shared queue at the server: Server-Timing sees the wait, the overhead stays
    shared = station_for(
        row(server_dispatch="shared_queue", connections=64, keepalive=True, work_sleep_us=4000), svc
    ).station
    assert (shared.overhead_s, shared.overhead_mean_s) == (0.003, 0.006)


def test_event_loops_doing_cpu_work_share_the_cores_and_waiting_ones_do_not():
    """C epoll runs a loop per thread; four loops pinned to one core can only spin one at a time
    (the capacity search once fitted 4 x M/M/1 here, stretched S to 6 ms to meet the measured
    ceiling, and put its first probe at 34/s of a 650/s server)."""
    epoll = dict(server_dispatch="event_loop", server_dispatch_source="catalogue")
    spin = station_for(row(**epoll, server_threads=4, server_cores=1, work_spin_us=2000), SVC)
    assert spin.station.loops == 1 and "4 loops share 1 core(s): 1 at once" in spin.servers_source
    two = station_for(row(**epoll, server_threads=4, server_cores=2, work_spin_us=2000), SVC)
    assert two.station.loops == 2
    # loops that block while they wait (the C server's sleep) hold S but not a core
    sleep = station_for(
        row(**epoll, server_threads=4, server_cores=1, work_sleep_us=2000, server_waits_block=True),
        SVC,
    )
    assert sleep.station.loops == 4


def test_an_scv_a_small_probe_cannot_tell_from_one_keeps_the_exponential_model_and_its_p99():
    """The reference M/M/4 server's 200-request probe read an SCV of 0.72 (its round trip, a
    constant, and chance: 0.72-0.86 in three runs), and a point threshold of 0.25 made one run
    of three M/G/4 with no p99 at all (a fresh-clone CI failure). Two standard errors of an
    exponential's sample SCV at n = 200 are 0.4: still M/M/4, with its p99. The same SCV from
    5,000 Server-Timing samples is told apart: M/G/4, no p99 claimed."""
    r = row(
        server_impl="cmd", server_dispatch="shared_queue", server_cpu_pct=5.0, throughput_rps=300.0
    )
    probe = ServiceEstimate(0.0045, 0.717, "single_user_probe", n=200)
    p = predict_cell(r, probe)
    assert p["model"] == "M/M/4" and math.isfinite(p["p99_ms"]), p["model"]
    timed = ServiceEstimate(0.0045, 0.717, "server_timing", n=5000)
    q = predict_cell(r, timed)
    assert "M/G/4" in q["model"] and math.isnan(q["p99_ms"]), q["model"]
