"""`cluster:` security in the experiment file: a tls:// scheduler needs its certificates, a tcp://
scheduler off loopback needs `insecure: true` (and then carries the warning), the local cluster
speaks TLS unless told otherwise."""

import pytest

from orchestrator import experiment
from orchestrator.errors import PerfctlError
from orchestrator.experiment.cluster import INSECURE_WARNING, loopback

BASE = """
name: t
servers: {c: {impl: c, model: epoll}}
load: {mode: closed, connections: 2, duration: 1s}
"""
TLS = "tls: {ca: c/ca.pem, cert: c/client.pem, key: c/client-key.pem}"


def cluster(write_yaml, text: str):
    return experiment.load_plan(write_yaml(BASE + f"cluster: {text}\n")).experiment.cluster


@pytest.mark.parametrize(
    "text, needles",
    [
        ("{scheduler: tcp://10.0.0.5:8786}", ["plain TCP", "insecure: true", "tls://"]),
        ("{scheduler: tcp://db.example:8786}", ["plain TCP", "insecure: true"]),
        ("{scheduler: tls://10.0.0.5:8786}", ["needs `tls:", "perfctl cluster certs"]),
        (f"{{scheduler: tcp://127.0.0.1:8786, {TLS}}}", ["scheduler is tcp://"]),
        (f"{{local: {{hosts: 2}}, {TLS}}}", ["the local cluster makes its own"]),
    ],
)
def test_an_unsafe_or_incomplete_cluster_is_refused_with_the_fix(write_yaml, text, needles):
    with pytest.raises(PerfctlError) as e:
        cluster(write_yaml, text)
    msg = str(e.value)
    assert "key `cluster`" in msg, msg
    for n in needles:
        assert n in msg, msg


def test_tls_and_insecure_and_loopback_clusters_are_accepted_with_their_warning(write_yaml):
    tls = cluster(write_yaml, f"{{scheduler: tls://10.0.0.5:8786, {TLS}}}")
    assert tls.uses_tls and tls.warning is None and str(tls.tls.key) == "c/client-key.pem"
    insecure = cluster(write_yaml, "{scheduler: tcp://10.0.0.5:8786, insecure: true}")
    assert not insecure.uses_tls and insecure.warning == INSECURE_WARNING
    local_tcp = cluster(write_yaml, "{scheduler: tcp://127.0.0.1:8786}")
    assert local_tcp.warning == INSECURE_WARNING  # allowed on loopback, still said
    assert cluster(write_yaml, "{local: {hosts: 2}}").uses_tls
    assert cluster(write_yaml, "{local: {hosts: 2}, insecure: true}").warning == INSECURE_WARNING


def test_loopback_is_127_8_ipv6_one_and_localhost_only():
    assert all(map(loopback, ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"]))
    assert not any(map(loopback, ["10.0.0.1", "0.0.0.0", "example.org", "128.0.0.1"]))
