"""models/bottleneck.py: every measured resource's utilisation, the one named the bottleneck,
and the operational laws checked on measured figures."""

from __future__ import annotations

import pytest

from models.bottleneck import bottleneck, bottleneck_line, law_checks, utilisations
from models.parameters import ServiceEstimate

SVC = ServiceEstimate(mean_s=0.004, scv=1.0, source="server_timing")


def test_each_measured_resource_has_its_utilisation_and_the_busiest_is_the_bottleneck():
    row = dict(
        throughput_rps=920.0,
        server_cores=2,
        server_cpu_pct=62.0,
        tcp_accept_queue_max=3,
        server_backlog=128,
        loadgen_cpu_pct=35.0,
        rtt_measured_ms=0.1,
        measured_mean_ms=9.0,
    )
    u = {x.resource: x.value for x in utilisations(row, SVC, servers=4)}
    assert u["cpu"] == pytest.approx(0.31)
    assert u["workers"] == pytest.approx(920 * 0.004 / 4)
    assert u["accept queue"] == pytest.approx(3 / 128)
    assert u["load generator"] == pytest.approx(0.35)
    assert u["injected delay"] == pytest.approx(0.1 / 9.0)
    utils = utilisations(row, SVC, servers=4)
    assert bottleneck(utils).resource == "workers"
    line = bottleneck_line(utils)
    assert line.startswith("bottleneck: workers 92%") and "cpu 31%" in line


def test_a_database_and_an_injected_delay_can_limit_a_cell():
    db = ServiceEstimate(mean_s=0.004, scv=1.0, source="server_timing", db_mean_s=0.003)
    u = utilisations(dict(throughput_rps=600.0), db, servers=16, db_servers=2)
    assert bottleneck(u).resource == "database"  # 600 x 3 ms / 2 = 90%
    slow_net = dict(throughput_rps=10.0, rtt_measured_ms=40.0, measured_mean_ms=45.0)
    assert bottleneck(utilisations(slow_net, SVC, servers=4)).resource == "injected delay"
    assert bottleneck_line(utilisations(dict(throughput_rps=10.0), SVC, servers=4)).startswith(
        "bottleneck: none saturated"
    )


def test_the_operational_laws_are_flagged_where_the_measured_figures_disagree():
    # CPU: 500/s x 1 ms spin on one core is 50%, the server used 80%
    cpu = law_checks(
        dict(throughput_rps=500.0, work_spin_us=1000, server_cores=1, server_cpu_pct=80.0)
    )
    assert len(cpu) == 1 and "utilization law (CPU)" in cpu[0] and "outside the service" in cpu[0]
    assert (
        law_checks(
            dict(throughput_rps=500.0, work_spin_us=1000, server_cores=1, server_cpu_pct=52.0)
        )
        == []
    )
    # workers: X S / c above 1 cannot be
    assert "X S / c = 1.20 > 1" in law_checks(dict(throughput_rps=1200.0), SVC, servers=4)[0]
    # Little's law in a closed loop: 16 users, X (R + Z) = 100/s x (20 ms + 100 ms) = 12
    little = law_checks(
        dict(
            load_mode="closed",
            connections=16,
            throughput_rps=100.0,
            measured_mean_ms=20.0,
            think_time_s=0.1,
        )
    )
    assert "Little's law" in little[0] and "N = 16" in little[0]
    assert (
        law_checks(
            dict(
                load_mode="closed",
                connections=12,
                throughput_rps=100.0,
                measured_mean_ms=20.0,
                think_time_s=0.1,
            )
        )
        == []
    )
    # flow balance: an open cell that served less than was offered
    assert (
        "flow balance"
        in law_checks(dict(load_mode="open", target_rate=1000.0, throughput_rps=800.0))[0]
    )
