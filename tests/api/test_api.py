"""The Python API (`import perfctl`): perfctl.run returns the Run that results.load gives for
the same directory, perfctl.compare the comparison with the verdict `perfctl compare` exits
on, and every problem the user can fix is one PerfctlError whose text is the paragraph the
command line prints."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from orchestrator import api, results
from orchestrator.api.run_experiment import _overrides
from orchestrator.errors import PerfctlError

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

ROOT = Path(__file__).resolve().parents[2]

# One closed-load cell; its quick profile runs five short trials, the fewest with which
# compare can judge a cell (a Mann-Whitney p below 0.05 / 3).
TINY = """
name: api-tiny
servers:
  py: {impl: python, model: async}
workload: {path: /work, params: {spin_us: 100}}
load: {mode: closed, connections: "{connections}", duration: 1s, warmup: 300ms}
matrix: {connections: [2]}
repeats: 10
placement: {server_cpus: [0], loadgen_cpus: [1]}
profiles:
  quick: {repeats: 5}
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="160"),
    )


def same_paragraph(cli_out: subprocess.CompletedProcess, error: PerfctlError) -> None:
    assert cli_out.returncode == 2, cli_out.stdout + cli_out.stderr
    assert " ".join(cli_out.stderr.split()) == " ".join(f"perfctl: error: {error}".split())


def test_import_perfctl_is_the_api_module_of_this_checkout():
    """pyproject.toml installs orchestrator/api/perfctl/ as `perfctl`, which hands over
    orchestrator.api itself (`pip install -e .`, as make setup runs, installs the name)."""
    code = (
        "import perfctl, orchestrator.api, orchestrator.errors, sys;"
        "assert perfctl is orchestrator.api, perfctl;"
        "assert perfctl.PerfctlError is orchestrator.errors.PerfctlError;"
        "assert callable(perfctl.run) and callable(perfctl.load) and callable(perfctl.compare);"
        "print(orchestrator.api.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (
        done.stderr + "\n(`import perfctl` needs the package installed from this checkout: "
        "pip install -e . or make setup)"
    )
    assert Path(done.stdout.strip()).parent == ROOT / "orchestrator" / "api"


def test_a_bad_experiment_raises_the_paragraph_perfctl_run_prints(write_yaml):
    bad = write_yaml(TINY + "lod: {}\n")
    with pytest.raises(PerfctlError) as e:
        api.run(bad, out=bad.parent / "never")
    assert "`lod`" in str(e.value) and str(bad) in str(e.value)
    assert not (bad.parent / "never").exists()  # nothing written before the checks pass
    same_paragraph(cli("run", str(bad), "--out", str(bad.parent / "never")), e.value)


def test_an_unknown_profile_raises_the_paragraph_perfctl_run_prints(write_yaml):
    exp = write_yaml(TINY)
    with pytest.raises(PerfctlError) as e:
        api.run(exp, profile="slow")
    assert "no profile named 'slow'" in str(e.value)
    same_paragraph(cli("run", str(exp), "--profile", "slow"), e.value)


def test_a_bad_load_setting_raises_the_paragraph_perfctl_load_prints():
    with pytest.raises(PerfctlError) as e:
        api.load("http://127.0.0.1:9/", duration="1 fortnight")
    assert "--duration" in str(e.value)
    same_paragraph(cli("load", "http://127.0.0.1:9/", "--duration", "1 fortnight"), e.value)
    with pytest.raises(PerfctlError) as e:
        api.load("ftp://127.0.0.1:9/")
    same_paragraph(cli("load", "ftp://127.0.0.1:9/"), e.value)


def test_comparing_directories_that_are_not_runs_raises_the_paragraph_compare_prints(tmp_path):
    with pytest.raises(PerfctlError) as e:
        api.compare(tmp_path / "a", tmp_path / "b")
    same_paragraph(cli("compare", str(tmp_path / "a"), str(tmp_path / "b")), e.value)


def test_set_takes_a_dict_whose_values_keep_their_python_type():
    assert _overrides({"load.duration": "2s", "matrix.connections": [1, 4], "models": False}) == [
        'load.duration="2s"',
        "matrix.connections=[1, 4]",
        "models=false",
    ]
    assert _overrides(["load.duration=2s"]) == ["load.duration=2s"]
    with pytest.raises(PerfctlError, match="set="):
        _overrides("load.duration=2s")


def test_a_dict_override_changes_the_plan_as_the_same_set_flag_does(write_yaml):
    from orchestrator.experiment import load_plan

    exp = write_yaml(TINY)
    by_dict = load_plan(exp, None, _overrides({"matrix.connections": [1, 3], "repeats": 2}))
    by_flag = load_plan(exp, None, ["matrix.connections=[1, 3]", "repeats=2"])
    assert [c.cell_id for c in by_dict.cells] == [c.cell_id for c in by_flag.cells]
    assert by_dict.repeats == by_flag.repeats == 2 and len(by_dict.cells) == 2


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> dict:
    """Two runs of TINY through perfctl.run: the profile and a dict override applied."""
    tmp = tmp_path_factory.mktemp("api")
    exp = tmp / "tiny.yaml"
    exp.write_text(TINY)
    return {
        name: api.run(
            exp, set={"load.warmup": "200ms"}, profile="quick", out=tmp / name, plots=False
        )
        for name in ("a", "b")
    }


@pytest.mark.usefixtures("live")
def test_run_returns_the_run_results_load_gives_for_its_directory(two_runs):
    run = two_runs["a"]
    loaded = results.load(run.path)
    assert type(run) is type(loaded) is results.Run
    assert run.path == loaded.path and run.info == loaded.info
    pd.testing.assert_frame_equal(run.trials, loaded.trials)
    assert run.axes == loaded.axes == ["server", "connections"]
    assert run.requests.shape == loaded.requests.shape and len(run.requests) > 0
    assert len(run.trials) == 5 and (run.trials["requests"] > 0).all()
    assert run.info["profile"] == "quick"
    assert run.info["overrides"] == ['load.warmup="200ms"']


@pytest.mark.usefixtures("live")
def test_compare_of_two_runs_is_data_with_the_verdict_perfctl_compare_exits_on(two_runs):
    a, b = two_runs["a"], two_runs["b"]
    result = api.compare(a, b)
    assert result.verdict in ("no regression", "regression", "inconclusive")
    table = result.table()
    assert list(table["metric"]) == ["throughput", "p50", "p99"]
    assert {"cell", "verdict", "base", "cand", "change", "ci_low", "ci_high", "p_holm"} <= set(
        table.columns
    )
    assert (table["cell"] == result.cells[0].label).all() and len(result.cells) == 1
    same_dirs = api.compare(a.path, str(b.path))  # directories work as Runs do
    assert same_dirs.verdict == result.verdict
    assert cli("compare", str(a.path), str(b.path)).returncode == result.exit_code
