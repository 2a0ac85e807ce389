"""The light commands answer at once because they load no numerical stack: `perfctl --help`,
`--version`, `plan FILE` and `doctor`, each invoked through the CLI's app in a fresh
interpreter, leave none of pandas, numpy, scipy, matplotlib, pyarrow, dask, distributed or
uvloop in sys.modules; `import perfctl` neither. This guards what is imported, not a time
(benchmarks/cli_startup.py times the commands)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "numpy", "scipy", "matplotlib", "pyarrow", "dask", "distributed", "uvloop")

# Runs the commands given as JSON argv lists through the app, as the perfctl script does
# (standalone_mode=False: an exit code comes back instead of SystemExit), then imports the
# modules named after them, and prints what ran and which heavy packages were loaded.
PROBE = """
import contextlib, io, json, sys
from orchestrator.cli.main import app
commands, then_import = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ran = []
for argv in commands:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = app(argv, standalone_mode=False)
        except SystemExit as e:
            code = e.code
    ran.append({"argv": argv, "code": code or 0, "out": out.getvalue()})
for name in then_import:
    __import__(name)
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[3])))
print(json.dumps({"ran": ran, "heavy": heavy}))
"""


def probe(commands: list[list[str]], then_import: tuple[str, ...] = ()) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            json.dumps(commands),
            json.dumps(then_import),
            json.dumps(HEAVY),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_help_version_plan_and_doctor_run_without_loading_the_numerical_stack():
    result = probe([["--help"], ["--version"], ["plan", "experiments.yaml"], ["doctor"]])
    help_, version, plan, doctor = result["ran"]
    assert all(r["code"] == 0 for r in result["ran"]), result["ran"]
    assert "Usage:" in help_["out"] and "compare" in help_["out"]
    assert version["out"].startswith("perfctl ")
    assert "trials, estimated wall time" in plan["out"]
    assert "network emulation backends" in doctor["out"]
    assert result["heavy"] == [], f"the light commands loaded {result['heavy']}"


def test_import_perfctl_loads_none_of_the_numerical_stack():
    result = probe([], then_import=("orchestrator.api",))
    assert result["heavy"] == []


@pytest.mark.parametrize(
    "module",
    [
        "orchestrator.api.run_experiment",
        "orchestrator.api.compare_runs",
        "orchestrator.api.load_url",
    ],
)
def test_the_guard_sees_a_heavy_import_when_there_is_one(module):
    """The check above can fail: the modules behind perfctl.run, .compare and .load, imported
    after the same commands, show up in it."""
    result = probe([["--version"]], then_import=(module,))
    assert "numpy" in result["heavy"], result  # each of them loads numpy at least


RUN_PROBE = """
import json, sys
from orchestrator.cli.main import app
try:
    code = app(sys.argv[1:], standalone_mode=False)
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code or 0, "loaded": sorted(sys.modules)}))
"""


@pytest.mark.untimed  # what it records, not how fast
@pytest.mark.usefixtures("live")
def test_a_run_without_models_or_search_loads_no_scipy_stats(tmp_path):
    """scipy.stats and the queueing models take ~1 s to import: a run that fits no models and
    searches nothing (its trials' rows, summary and plots) does without them. Nothing else
    about the run changes; this guards the start-up of most `perfctl run`s and of make test."""
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "name: light\nservers:\n  py: {impl: python, model: async}\n"
        "load: {mode: closed, connections: 2, duration: 500ms, warmup: 0s}\nrepeats: 1\n"
    )
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", RUN_PROBE, "run", str(exp), "--out", str(out), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 0, done.stdout[-2000:]
    loaded = set(result["loaded"])
    assert (out / "trials.csv").is_file() and list((out / "plots").glob("*.png"))
    assert "matplotlib" in loaded and "orchestrator.run.trial_row" in loaded  # it did draw and sum
    assert not {"scipy.stats", "models.queues", "models.usl", "models.closed"} & loaded
