"""`load.driver` in the experiment file (loadgen/DRIVER.md): the default, bundled drivers by
name, any command, and every mismatch refused before anything runs, naming file, key and fix."""

import pytest

from orchestrator import experiment
from orchestrator.errors import PerfctlError
from orchestrator.experiment.load import DriverCommand
from orchestrator.run import driver as run_driver

BASE = """
name: d
servers:
  py: {impl: python, model: async}
workload: {path: /work, params: {spin_us: 10}}
load: {mode: closed, connections: 2, duration: 2s}
"""
RMI = """
name: d
servers:
  http: {impl: java, model: pool}
  rmi: {impl: java, model: rmi, threads: 8}
  rmi1: {impl: java, model: rmi-single, backlog: 50}
workload: {path: /work, params: {spin_us: 10}}
load: {driver: "{driver}", mode: "{mode}", connections: 2, duration: 2s, rate: 100}
matrix: {driver: [http, rmi], mode: [closed, open, burst]}
exclude: [{server: http, driver: rmi}, {server: rmi, driver: http}, {server: rmi1, driver: http}]
"""


def test_the_default_driver_keeps_cell_ids(write_yaml):
    """Cells written before drivers existed keep their ids: `driver: http` is the default and
    is left out of the hash; this id is what main computes for BASE (without drivers)."""
    plain = experiment.load_plan(write_yaml(BASE))
    explicit = experiment.load_plan(
        write_yaml(BASE.replace("mode: closed", "driver: http, mode: closed"), "b.yaml")
    )
    [a], [b] = plain.cells, explicit.cells
    assert a.cell_id == b.cell_id == "87c4685d35e8"  # main at 0491aea, before drivers
    assert a.load.driver == "http" and a.load.driver_label == "http"
    other = experiment.load_plan(
        write_yaml(
            BASE.replace("mode: closed", 'driver: {cmd: "x {spec} {out}"}, mode: closed'), "c.yaml"
        )
    )
    assert other.cells[0].cell_id != a.cell_id


def test_http_and_rmi_in_one_experiment(write_yaml):
    plan = experiment.load_plan(write_yaml(RMI))
    pairs = {(c.server_name, c.load.driver, c.load.mode) for c in plan.cells}
    assert len(plan.cells) == 3 * 3
    assert ("rmi1", "rmi", "burst") in pairs and ("http", "http", "open") in pairs
    assert {c.server.concurrency_model for c in plan.cells} == {"pool", "rmi", "rmi-single"}


@pytest.mark.parametrize(
    "patch, key, words",
    [
        (("mode: closed", "driver: grpc, mode: closed"), "load.driver", "unknown driver 'grpc'"),
        (
            ("mode: closed", 'driver: {cmd: "x {spec}"}, mode: closed'),
            "load.driver",
            "must contain {out}",
        ),
        (
            ("mode: closed", "driver: rmi, mode: ramp, ramp: {rates: [10]}"),
            "load",
            "driver 'rmi' has no ramp mode",
        ),
        (("mode: closed", "driver: rmi, mode: closed"), "load.driver", "speaks HTTP"),
        (
            ("{impl: python, model: async}", "{impl: java, model: rmi}"),
            "load.driver",
            "speaks Java RMI",
        ),
        (
            ("{impl: python, model: async}", "{impl: python, model: rmi}"),
            "servers.py",
            "no concurrency model 'rmi'",
        ),
    ],
)
def test_mismatches_are_refused_before_anything_runs(write_yaml, patch, key, words):
    path = write_yaml(BASE.replace(*patch))
    with pytest.raises(PerfctlError) as e:
        experiment.load_plan(path)
    msg = str(e.value)
    assert str(path) in msg and f"`{key}`" in msg and words in msg and "Fix:" in msg, msg


def test_driver_commands(tmp_path):
    spec, out = tmp_path / "dir with space" / "spec.json", tmp_path / "o"
    argv = run_driver.argv(DriverCommand(cmd="prog --x '{spec}' {out}"), spec, out)
    assert argv == ["prog", "--x", str(spec), str(out)]
    assert run_driver.argv("http", spec, out)[1:] == ["-m", "loadgen", str(spec), str(out)]
    rmi = run_driver.argv("rmi", spec, out)
    assert rmi[-3:] == ["perfctl.driver.RmiDriver", str(spec), str(out)]
    assert any(a.startswith("--add-exports=java.rmi/sun.rmi.transport") for a in rmi)


def test_the_rmi_driver_runs_under_its_chosen_collector_unless_the_environment_names_another(
    tmp_path, monkeypatch
):
    spec, out = tmp_path / "spec.json", tmp_path / "o"
    monkeypatch.delenv(run_driver.RMI_DRIVER_GC_ENV, raising=False)
    argv = run_driver.argv("rmi", spec, out)
    assert all(f in argv for f in run_driver.RMI_DRIVER_GC_FLAGS)
    monkeypatch.setenv(run_driver.RMI_DRIVER_GC_ENV, "-XX:+UseZGC -Xmx1g")
    argv = run_driver.argv("rmi", spec, out)
    assert "-XX:+UseZGC" in argv and "-Xmx1g" in argv
    assert not any(f in argv for f in run_driver.RMI_DRIVER_GC_FLAGS if "GC" in f)
