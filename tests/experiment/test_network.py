"""Network validation, expected RTTs, verify() and backend choice."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.errors import PerfctlError
from orchestrator.experiment.network import Network
from orchestrator.netem import choose_backend, verify, verify_bandwidth
from orchestrator.netem import injectors


def test_netem_spec_units_and_defaults():
    s = Network.from_config({"delay": "10ms", "jitter": "250us", "loss": "1%", "bandwidth": "10mbit"})
    assert s.backend == "auto"
    assert s.delay_ms == 10.0 and s.delay_up_ms == 10.0 and s.delay_down_ms == 10.0
    assert s.jitter_ms == pytest.approx(0.25)
    assert s.loss == pytest.approx(0.01)
    assert s.rto_ms == 200.0
    assert s.bandwidth_bps == 10e6
    assert s.distribution == "uniform"
    s2 = Network.from_config({"delay": "5ms", "delay_down": "1ms"})
    assert (s2.delay_up_ms, s2.delay_down_ms) == (5.0, 1.0)
    assert Network.from_config({"delay": 0.002}).delay_ms == pytest.approx(2.0)  # bare = seconds
    assert Network.from_config(None).shapes is False


@pytest.mark.parametrize("bad,key", [
    ({"delay": "10 parsecs"}, "network.delay"),
    ({"jitter": "-1ms"}, "network.jitter"),
    ({"loss": "150%"}, "network.loss"),
    ({"bandwidth": "fast"}, "network.bandwidth"),
    ({"bandwidth": "0mbit"}, "network.bandwidth"),
    ({"distribution": "cauchy"}, "network.distribution"),
    ({"backend": "tc"}, "network.backend"),
    ({"dealy": "10ms"}, "network.dealy"),
])
def test_netem_spec_rejects_bad_input(bad, key):
    with pytest.raises(PerfctlError, match=key.replace(".", r"\.")):
        Network.from_config(bad)
    with pytest.raises(ValidationError):
        Network.model_validate(bad)


def test_netem_spec_unknown_key_message_lists_allowed():
    with pytest.raises(PerfctlError, match="unknown key; allowed keys are backend, delay"):
        Network.from_config({"latency": "10ms"}, where="experiments.yaml: network")


def test_netem_spec_tbf_is_bandwidth_only():
    Network.from_config({"backend": "tbf", "bandwidth": "10mbit"})
    with pytest.raises(PerfctlError, match="bandwidth only"):
        Network.from_config({"backend": "tbf", "bandwidth": "10mbit", "delay": "1ms"})
    with pytest.raises(PerfctlError, match="set bandwidth"):
        Network.from_config({"backend": "tbf"})
    with pytest.raises(PerfctlError, match="mapping"):
        Network.from_config("10ms")


def test_netem_expected_rtt():
    assert Network(delay="10ms").expected_rtt_ms() == 20.0
    assert Network(delay_up="3ms", delay_down="7ms").expected_rtt_ms() == 10.0
    # symmetric jitter smaller than the delay has mean 0
    assert Network(delay="10ms", jitter="2ms").expected_rtt_ms() == pytest.approx(20.0)
    # pareto jitter is one-sided with mean = jitter, per direction
    assert Network(delay="10ms", jitter="2ms", distribution="pareto").expected_rtt_ms() == pytest.approx(24.0)
    # clamping at zero raises the mean: uniform(-2, 2) around 1 ms -> E = 9/8 per direction
    assert Network(delay="1ms", jitter="2ms").expected_rtt_ms() == pytest.approx(2 * 9 / 8)
    n = Network(delay="0ms", jitter="1ms", distribution="normal").expected_rtt_ms()
    assert n == pytest.approx(2 * 0.3989422804, rel=1e-6)


def test_netem_expected_rtt_p50():
    assert Network(delay="10ms").expected_rtt_p50_ms() == 20.0
    assert Network(delay="10ms", jitter="2ms").expected_rtt_p50_ms() == pytest.approx(20.0, abs=0.02)
    # pareto median is below its mean
    par = Network(delay="10ms", jitter="2ms", distribution="pareto")
    assert 20.0 < par.expected_rtt_p50_ms() < par.expected_rtt_ms()
    # loss 40 %: more than half the round trips carry a hold-back
    lossy = Network(delay="1ms", loss=0.4, rto="20ms")
    assert lossy.expected_rtt_p50_ms() == pytest.approx(22.0, abs=0.01)


def test_netem_describe():
    s = Network(delay="10ms", jitter="500us", distribution="normal", loss="1%", bandwidth="10mbit")
    assert s.describe() == "delay=10ms jitter=500us(normal) loss=1% rto=200ms bw=10mbit"
    assert Network(delay_up="1ms", delay_down="2ms").describe() == "delay_up=1ms delay_down=2ms"


@pytest.mark.parametrize("expected,measured,ok", [
    (20.0, 20.0, True),
    (20.0, 21.9, True),      # within 10 %
    (20.0, 22.1, False),     # beyond 10 % (2 ms)
    (20.0, 17.9, False),
    (2.0, 2.45, True),       # 10 % would be 0.2 ms; the 0.5 ms floor applies
    (2.0, 2.6, False),
    (0.0, 0.3, True),
    (0.0, -0.6, False),
])
def test_netem_verify(expected, measured, ok):
    got, reason = verify(expected, measured)
    assert got is ok
    assert reason.startswith("ok:" if ok else "invalid:")
    assert f"{measured:.3f} ms" in reason and f"{expected:.3f} ms" in reason


def test_netem_verify_bandwidth():
    assert verify_bandwidth(10e6, 9.5e6)[0]
    ok, reason = verify_bandwidth(10e6, 8e6)
    assert not ok and "-20.0%" in reason


def test_netem_choose_backend(monkeypatch):
    assert choose_backend(Network(backend="proxy", delay="1ms")) == "proxy"
    assert choose_backend(Network(backend="tbf", bandwidth="1mbit")) == "tbf"
    monkeypatch.setattr(injectors, "backend_status",
                        lambda name: (name != "netem", "no sch_netem") if name else None)
    assert choose_backend(Network(delay="1ms")) == "proxy"
    monkeypatch.setattr(injectors, "backend_status", lambda name: (True, "works"))
    assert choose_backend(Network(delay="1ms")) == "netem"
    # tbf is never chosen automatically, even for bandwidth-only specs
    assert choose_backend(Network(bandwidth="1mbit")) == "netem"
