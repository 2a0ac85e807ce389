"""Experiment files: validation messages, matrix expansion, profiles, overrides, units."""

import pytest

from orchestrator import experiment
from orchestrator.errors import PerfctlError
from orchestrator.experiment import units

BASE = """
name: t
servers:
  py: {impl: python, model: async}
  c: {impl: c, model: pool, threads: "{threads}"}
workload: {path: /work, params: {spin_us: "{spin}"}}
load: {mode: open, rate: "{rate}", connections: 8, duration: 2s, warmup: 500ms}
matrix: {rate: [100, 200], threads: [2, 4], spin: [10]}
exclude: [{server: py, threads: 4}]
repeats: 2
profiles: {quick: {load: {duration: 1s}, repeats: 1}}
"""


def test_expands_cross_product_minus_exclude(write_yaml):
    plan = experiment.load_plan(write_yaml(BASE))
    labels = [(c.server_name, c.values["rate"], c.values["threads"]) for c in plan.cells]
    assert ("py", 100, 4) not in labels and ("py", 100, 2) in labels
    assert len(plan.cells) == 2 * 2 * 2 - 2
    assert plan.trial_count == len(plan.cells) * 2
    c = next(c for c in plan.cells if c.server_name == "c" and c.values["threads"] == 4)
    assert c.server.threads == 4 and c.load.rate_rps in (100, 200)
    assert c.workload.params["spin_us"] == 10
    assert c.load.duration_s == 2.0 and c.load.warmup_s == 0.5


def test_cell_ids_are_stable_and_distinct(write_yaml):
    a = experiment.load_plan(write_yaml(BASE))
    b = experiment.load_plan(write_yaml(BASE, "other.yaml"))
    assert [c.cell_id for c in a.cells] == [c.cell_id for c in b.cells]
    assert len({c.cell_id for c in a.cells}) == len(a.cells)


def test_profile_and_set_override(write_yaml):
    plan = experiment.load_plan(
        write_yaml(BASE), profile="quick", overrides=["load.connections=3", "matrix.rate=[50]"]
    )
    assert plan.repeats == 1
    assert all(c.load.duration_s == 1.0 and c.load.connections == 3 for c in plan.cells)
    assert {c.values["rate"] for c in plan.cells} == {50}


def test_include_adds_a_cell(write_yaml):
    text = BASE + "include: [{server: py, rate: 999, threads: 4, spin: 10}]\n"
    plan = experiment.load_plan(write_yaml(text))
    assert any(c.values["rate"] == 999 and c.server_name == "py" for c in plan.cells)


@pytest.mark.parametrize(
    "patch, key, words",
    [
        (("duration: 2s", "duration: 2parsecs"), "load.duration", "not a duration"),
        (("connections: 8", "connectoins: 8"), "load.connectoins", "unknown key"),
        (('spin_us: "{spin}"', 'spin_us: "{spinn}"'), "workload.params.spin_us", "{spinn}"),
        (("rate: [100, 200]", "rate: []"), "matrix.rate", "no values"),
        (("model: pool", "model: fork"), "servers.c", "no concurrency model 'fork'"),
        (
            ("exclude: [{server: py, threads: 4}]", "exclude: [{server: py, cores: 4}]"),
            "exclude[0].cores",
            "not a matrix axis",
        ),
        (("repeats: 2", "repeats: zero"), "repeats", "valid integer"),
    ],
)
def test_bad_input_names_file_key_and_fix(write_yaml, patch, key, words):
    path = write_yaml(BASE.replace(*patch))
    with pytest.raises(PerfctlError) as e:
        experiment.load_plan(path)
    msg = str(e.value)
    assert str(path) in msg and f"`{key}`" in msg and words in msg and "Fix:" in msg


def test_excluding_everything_is_an_error(write_yaml):
    path = write_yaml(
        BASE.replace("exclude: [{server: py, threads: 4}]", "exclude: [{server: py}, {server: c}]")
    )
    with pytest.raises(PerfctlError, match="empty after exclude"):
        experiment.load_plan(path)


def test_open_mode_needs_rate(write_yaml):
    path = write_yaml(BASE.replace('rate: "{rate}", ', "").replace("rate: [100, 200], ", ""))
    with pytest.raises(PerfctlError, match="open mode needs `rate`"):
        experiment.load_plan(path)


def test_unknown_profile_and_bad_set(write_yaml):
    path = write_yaml(BASE)
    with pytest.raises(PerfctlError, match="no profile named 'slow'"):
        experiment.load_plan(path, profile="slow")
    with pytest.raises(PerfctlError, match="KEY=VALUE"):
        experiment.load_plan(path, overrides=["load.duration"])


def test_command_server_needs_port_placeholder(write_yaml):
    path = write_yaml(BASE.replace("py: {impl: python, model: async}", 'py: {cmd: "sleep 10"}'))
    with pytest.raises(
        PerfctlError, match=r"\{port\} appears neither in cmd nor in any of its files"
    ):
        experiment.load_plan(path)


def test_not_yaml_and_missing_file(tmp_path, write_yaml):
    with pytest.raises(PerfctlError, match="not valid YAML at line"):
        experiment.load_plan(write_yaml("name: [unclosed\n"))
    with pytest.raises(PerfctlError, match="no such experiment file"):
        experiment.load_plan(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "text, seconds",
    [("250us", 250e-6), ("20ms", 0.02), ("10s", 10.0), ("2m", 120.0), (3, 3.0), ("1.5s", 1.5)],
)
def test_durations(text, seconds):
    assert units.duration_s(text) == pytest.approx(seconds)


def test_bandwidth_and_fraction():
    assert units.bandwidth_bps("10mbit") == 10e6
    assert units.bandwidth_bps("1mbps") == 8e6
    assert units.fraction("1%") == 0.01
    for bad in ("fast", "-1s", "10 lightyears"):
        with pytest.raises(ValueError):
            units.duration_s(bad)
    with pytest.raises(ValueError):
        units.fraction("150%")


def test_server_cores_as_an_axis(write_yaml):
    text = BASE.replace("repeats: 2", 'repeats: 1\nplacement: {server_cores: "{cores}"}').replace(
        "spin: [10]}", "spin: [10], cores: [1, 2]}"
    )
    plan = experiment.load_plan(write_yaml(text))
    cores = {c.values["cores"]: c.placement.server_cpu_list for c in plan.cells}
    assert len(cores[1]) == 1 and len(cores[2]) == 2


def test_unavailable_cpu_is_an_error(write_yaml):
    text = BASE + "placement: {server_cpus: [4096]}\n"
    with pytest.raises(PerfctlError, match="not available here"):
        experiment.load_plan(write_yaml(text))


def test_seq_placeholder_reaches_the_load_generator(write_yaml):
    text = BASE.replace(
        'workload: {path: /work, params: {spin_us: "{spin}"}}',
        'workload: {path: /register, method: POST, body: "user=u{seq}&pass=x"}',
    )
    plan = experiment.load_plan(write_yaml(text))
    assert all(c.workload.body == "user=u{seq}&pass=x" for c in plan.cells)


def test_free_ports_avoid_the_ephemeral_range():
    import socket

    from orchestrator.proc import ports

    low, _ = ports._ephemeral_range()
    for _ in range(20):
        port = ports.free_port()
        assert port < low or low <= 12000
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_command_server_declares_its_dispatch_and_threads_or_gets_a_clear_error(write_yaml):
    ok = BASE.replace(
        "py: {impl: python, model: async}",
        'py: {cmd: "srv --port {port}", dispatch: per_connection, threads: 8}',
    )
    py = next(c for c in experiment.load_plan(write_yaml(ok)).cells if c.server_name == "py")
    assert (py.server.dispatch, py.server.threads) == ("per_connection", 8)
    bad = ok.replace("dispatch: per_connection", "dispatch: round_robin")
    with pytest.raises(PerfctlError, match="dispatch") as e:
        experiment.load_plan(write_yaml(bad, "bad.yaml"))
    assert "shared_queue" in str(e.value) and "event_loop" in str(e.value)


def test_every_bundled_concurrency_model_declares_how_it_dispatches():
    from orchestrator.experiment import catalogue

    for impl, models in catalogue.CONCURRENCY_MODELS.items():
        for model in models:
            assert catalogue.dispatch_of(impl, model) in (
                "shared_queue",
                "per_connection",
                "event_loop",
            )
    assert catalogue.dispatch_of("c", "pool") == "per_connection"
    assert ("c", "epoll") in catalogue.BLOCKING_LOOPS


def test_trial_rows_say_how_the_server_dispatches_and_whether_a_probe_is_needed(write_yaml):
    from orchestrator.run.trial import needs_probe
    from orchestrator.run.trial_row import describe

    text = BASE.replace(
        "py: {impl: python, model: async}", 'py: {cmd: "srv --port {port}", threads: 2}'
    )
    cells = experiment.load_plan(write_yaml(text)).cells
    c = next(x for x in cells if x.server_name == "c")
    py = next(x for x in cells if x.server_name == "py")
    row = describe(c, [0])
    assert (row["server_dispatch"], row["server_dispatch_source"]) == (
        "per_connection",
        "catalogue",
    )
    assert row["keepalive"] is True and not needs_probe(c)
    assert describe(py, [0])["server_dispatch"] == "" and needs_probe(py)  # threads, no dispatch
