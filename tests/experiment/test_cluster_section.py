"""`cluster:` and host placement in the experiment file: validation, defaults, shards' specs."""

import pytest

from loadgen.spec import LoadSpec
from orchestrator import experiment
from orchestrator.errors import PerfctlError
from orchestrator.experiment.load import shard_seed, shard_specs
from orchestrator.experiment.placement import Placement

BASE = """
name: t
servers: {c: {impl: c, model: epoll}}
load: {mode: open, rate: 1000, connections: 9, duration: 2s}
"""


def test_a_local_cluster_with_hosts_placed(write_yaml):
    plan = experiment.load_plan(
        write_yaml(
            BASE
            + """
cluster: {local: {hosts: 3}}
placement: {server: {host: "{srv}", cpus: [0]}, loadgen: {hosts: [h2, h3]}}
matrix: {srv: [h1, h2]}
"""
        )
    )
    assert plan.experiment.cluster.local.host_names == ["h1", "h2", "h3"]
    hosts = ["h1", "h2", "h3"]
    assert [c.placement.server_host(hosts) for c in plan.cells] == ["h1", "h2"]
    assert plan.cells[0].placement.loadgen_hosts(hosts) == ["h2", "h3"]
    assert plan.cells[0].placement.server_cpu_list == [0]


def test_default_placement_is_server_on_the_first_host_load_on_the_rest():
    p = Placement()
    assert p.server_host(["h1", "h2", "h3"]) == "h1"
    assert p.loadgen_hosts(["h1", "h2", "h3"]) == ["h2", "h3"]
    assert p.loadgen_hosts(["h1"]) == ["h1"]


def test_placement_without_hosts_dumps_as_before_so_cell_ids_stay():
    assert Placement(server_cpus=[0]).model_dump() == {
        "server_cpus": [0],
        "server_cores": None,
        "loadgen_cpus": None,
    }


def test_unknown_local_host_is_refused_listing_the_known_ones(write_yaml):
    with pytest.raises(PerfctlError) as e:
        experiment.load_plan(
            write_yaml(
                BASE
                + """
cluster: {local: {hosts: 3}}
placement: {loadgen: {hosts: [h2, h9]}}
"""
            )
        )
    msg = str(e.value)
    assert "placement.loadgen.hosts" in msg and "'h9'" in msg and "h1, h2, h3" in msg


def test_hosts_without_a_cluster_are_refused(write_yaml):
    with pytest.raises(PerfctlError, match=r"placement.server.host.*no `cluster:`"):
        experiment.load_plan(write_yaml(BASE + "placement: {server: {host: h1}}\n"))


@pytest.mark.parametrize(
    "cluster, needle",
    [
        ("{scheduler: 10.0.0.1}", "tcp://HOST:8786"),
        ("{scheduler: tcp://a:1, local: {hosts: 2}}", "exactly one"),
        ("{local: {hosts: 0}}", "cluster.local.hosts"),
    ],
)
def test_bad_cluster_sections(write_yaml, cluster, needle):
    with pytest.raises(PerfctlError, match=needle.replace("(", r"\(")):
        experiment.load_plan(write_yaml(BASE + f"cluster: {cluster}\n"))


def test_burst_load_cannot_be_split_over_hosts(write_yaml):
    text = BASE.replace("mode: open, rate: 1000", "mode: burst") + "cluster: {local: {hosts: 2}}\n"
    with pytest.raises(PerfctlError, match="load.mode"):
        experiment.load_plan(write_yaml(text))


def test_shards_split_rate_and_connections_with_independent_seeds():
    spec = LoadSpec(mode="open", rate_rps=5000, connections=9, seed=42, max_outstanding=101)
    shards = shard_specs(spec, 2)
    assert [s.rate_rps for s in shards] == [2500, 2500]
    assert sum(s.connections for s in shards) == 9
    assert [s.max_outstanding for s in shards] == [51, 51]
    assert len({s.seed for s in shards}) == 2 and 42 not in {s.seed for s in shards}
    assert shard_specs(spec, 1)[0] == spec  # one host: the single-host schedule
    assert shard_seed(42, 1, 2) == shards[1].seed  # replays


def test_loadgen_hosts_as_a_matrix_axis(write_yaml):
    plan = experiment.load_plan(
        write_yaml(
            BASE
            + """
cluster: {local: {hosts: 3}}
placement: {loadgen: {hosts: "{lg}"}}
matrix: {lg: [h2, "h2,h3"]}
"""
        )
    )
    assert [c.placement.loadgen_hosts(["h1", "h2", "h3"]) for c in plan.cells] == [
        ["h2"],
        ["h2", "h3"],
    ]


def test_a_proxy_network_is_accepted_on_a_cluster(write_yaml):
    plan = experiment.load_plan(
        write_yaml(
            BASE
            + """
cluster: {local: {hosts: 3}}
network: {delay: 5ms}
"""
        )
    )
    assert plan.cells[0].network.shapes


@pytest.mark.parametrize(
    "network, key",
    [
        ("{delay: 5ms, backend: netem}", "network.backend"),
        ("{delay: 5ms, schedule: [{at: 1s, delay: 9ms}]}", "network.schedule"),
    ],
)
def test_what_the_cluster_proxy_cannot_do_is_refused_by_key(write_yaml, network, key):
    with pytest.raises(PerfctlError) as e:
        experiment.load_plan(
            write_yaml(BASE + f"cluster: {{local: {{hosts: 3}}}}\nnetwork: {network}\n")
        )
    msg = str(e.value)
    assert key in msg and "fix" in msg.lower(), msg
