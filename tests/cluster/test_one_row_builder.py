"""One trial row builder (run/trial_row.py) for both paths: a trial whose load generator, server and
samplers produced the same things gets the same trials.csv row on this host (run/trial.py) and
on a one-shard cluster (cluster/trial.py, collect.py), but for the columns only a cluster has."""

from __future__ import annotations

import json
import math
from functools import partial
from types import SimpleNamespace

import pandas as pd
import pytest
from cluster_kit import loadgen_output

from orchestrator import experiment
from orchestrator.cluster import collect, merge
from orchestrator.cluster.session import Clock
from orchestrator.experiment.load import shard_specs, to_load_spec
from orchestrator.measure import noise
from orchestrator.results.schema import NOISE_COLUMNS
from orchestrator.run import trial as local_trial
from orchestrator.run.trial_row import ServerEnd, TrialOutcome, network_row, trial_row

# untimed: the rows two code paths build from the same files: not how fast (tests/conftest.py)
pytestmark = pytest.mark.untimed

EXPERIMENT = """
name: same-row
servers: {c: {impl: c, model: epoll}}
workload: {path: /work, params: {spin_us: 100}}
load: {mode: closed, connections: 4, duration: 2s, warmup: 1s}
"""
START_NS = 7_000_000_000
RESOURCES = {"server_cpu_pct": 41.5, "server_rss_mb": 12.0, "server_threads_max": 3}
TREE = ["server process 4242 (sh) ended during the trial"]
# only a cluster's: where it ran, its clocks, whom the server saw; the noise columns are
# rolled up per host there (merge.noise_rollup) and read in one probe here
CLUSTER_ONLY = {
    "server_host",
    "loadgen_hosts",
    "shards",
    "clock_offset_ms_max",
    "clock_uncertainty_ms_max",
    "server_client_addresses",
}
# without a network block a cluster trial records network_backend only, as it always has
UNSHAPED_LOCAL_ONLY = {
    "rtt_expected_ms",
    "rtt_measured_ms",
    "rtt_measured_before_ms",
    "rtt_measured_after_ms",
}
ROLLED_UP = set(NOISE_COLUMNS) | {"quiet", "noise_reasons"}


@pytest.fixture
def cell(write_yaml):
    return experiment.load_plan(write_yaml(EXPERIMENT)).cells[0]


def _outcome(cell, tdir) -> TrialOutcome:
    spec = to_load_spec(cell.load, cell.workload, "10.0.0.1", 8080, seed=11)
    return TrialOutcome(
        cell, 1, 11, tdir, spec=spec, max_error_rate=0.01, startup_s=0.25, server_cpus=[0, 1]
    )


def _local_row(cell, tdir, alive: bool, refused_every: int) -> dict:
    """The row run/trial.py builds when the load generator exited 0 having written this
    output, and the sampler saw RESOURCES and TREE."""
    loadgen_output(tdir, 4000, START_NS, 1, refused_every=refused_every)
    (tdir / "loadgen.log").write_text("")
    out = _outcome(cell, tdir)
    out.server = ServerEnd(alive, False, None if alive else -9, 8080, tdir / "server.log")
    out.network, out.network_reasons = network_row(cell.network, None, [])
    out.columns = {}  # the TCP counters: this host's own
    sampler = SimpleNamespace(
        summary=lambda window: dict(RESOURCES),
        frame=lambda: pd.DataFrame({"t_s": [0.0], "cpu_pct": [41.5]}),
        watch=SimpleNamespace(reasons=lambda start_ns: list(TREE)),
        noise=[],
    )
    local_trial._load_and_samples(out, 0, sampler, {0, 1}, False)
    return trial_row(out)


def _cluster_row(cell, tdir, alive: bool, refused_every: int) -> dict:
    """The row cluster/trial.py builds when its one shard (on h2) returned this output and
    the server's host (h1) reported RESOURCES and TREE."""
    loadgen_output(tdir / "shards" / "h2", 4000, START_NS, 1, refused_every=refused_every)
    out = _outcome(cell, tdir)
    out.hosts = {"server_host": "h1", "loadgen_hosts": "h2", "shards": 1}
    out.network = {"network_backend": "none"}
    result = {
        "code": 0,
        "lead_ms": 12.0,
        "log": "",
        "files": {"summary.json": 1},
        "summary": (tdir / "shards" / "h2" / "summary.json").read_text(),
        "samples": [],
        "cpus": [1],
    }
    shard_noise = collect.shard_results(
        out,
        dict(zip(["h2"], shard_specs(out.spec, 1))),
        {"h1": "10.0.0.1", "h2": "10.0.0.2"},
        {"h1": Clock(0, 1000), "h2": Clock(250_000, 1000)},
        {"h2": result},
        5.0,
    )
    assert len(shard_noise) == 1
    server_out = {
        "missing": False,
        "code": None if alive else -9,
        "alive": alive,
        "refuses": False,
        "port": 8080,
        "clients": ["10.0.0.2"],
        "summary": dict(RESOURCES),
        "resources": pd.DataFrame({"t_s": [0.0], "cpu_pct": [41.5]}).to_parquet(index=False),
        "tree_reasons": list(TREE),
        "log": b"",
        "noise": noise.not_measured(),
        "noise_reasons": [],
        "network": {},
        "network_reasons": [],
    }
    server_noise = collect.server_result(out, "h1", "10.0.0.1", server_out)
    out.noise = partial(merge.noise_rollup, server_noise, shard_noise, window_s=2.0)
    return trial_row(out)


def _same(a, b) -> bool:
    return a == b or (
        isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    )


def test_the_same_trial_gets_the_same_row_on_this_host_and_on_a_one_shard_cluster(cell, tmp_path):
    local = _local_row(cell, tmp_path / "local", alive=True, refused_every=0)
    cluster = _cluster_row(cell, tmp_path / "cluster", alive=True, refused_every=0)
    assert set(cluster) - set(local) == CLUSTER_ONLY
    assert set(local) - set(cluster) == UNSHAPED_LOCAL_ONLY
    shared = [k for k in local if k in cluster and k not in ROLLED_UP]
    assert len(shared) > 40  # the configuration, the load's metrics, the server's, the verdict
    differ = {k: (local[k], cluster[k]) for k in shared if not _same(local[k], cluster[k])}
    assert not differ
    assert local["requests"] > 0 and local["latency_percentiles_from"] == "exact"
    assert local["server_cores"] == 2 and local["server_cpu_pct"] == 41.5
    assert local["invalid_reasons"] == TREE[0] and not local["valid"]
    # the columns keep one order: what a trial is, then what it measured, then the verdict
    assert [k for k in local if k in shared] == shared == [k for k in cluster if k in shared]
    for tdir in (tmp_path / "local", tmp_path / "cluster"):
        assert len(pd.read_parquet(tdir / "timeline.parquet")) > 0


def test_both_paths_give_the_same_sentences_for_the_same_failures(cell, tmp_path):
    """A server that died and a load with refused connections: the one set of sentences,
    the cluster's naming the server's host and the shard."""
    local = _local_row(cell, tmp_path / "local", alive=False, refused_every=10)
    cluster = _cluster_row(cell, tmp_path / "cluster", alive=False, refused_every=10)
    assert not local["valid"] and not cluster["valid"]
    here, there = local["invalid_reasons"], cluster["invalid_reasons"]
    error_rate = here.split("; ")[0]
    assert error_rate.startswith("error rate 9.98% > 1% (refused 263)")
    assert there.startswith(f"shard h2: {error_rate}; ")  # said once, by the shard that saw it
    died = "server died during the trial (exit -9){}; see {}"
    assert died.format("", tmp_path / "local" / "server.log") in here
    assert died.format(" on h1", tmp_path / "cluster" / "server.log") in there
    assert here.endswith(TREE[0]) and there.endswith(TREE[0])
    shards = json.loads((tmp_path / "cluster" / "shards.json").read_text())["shards"]
    assert [s["status"] for s in shards] == ["ok"]
