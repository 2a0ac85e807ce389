"""A finished run lands in the history once; when the store cannot be written a real `perfctl
run` still succeeds with its --commit and --label in run.json, a warning paragraph names
`history import`, and that import catches up; `history: false` keeps a run out."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from history_kit import run_dir

from orchestrator.history.add import add_finished_run
from orchestrator.history.store import Location, Store

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

PERFCTL = str(Path(sys.executable).parent / "perfctl")
EXPERIMENT = """
name: hist
servers: {pool: {impl: c, model: pool, threads: 2}}
workload: {path: /work, params: {spin_us: 100}}
load: {mode: closed, connections: 2, duration: 500ms, warmup: 100ms}
repeats: 1
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


def perfctl(cwd: Path, env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PERFCTL, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.usefixtures("live")
def test_a_run_whose_store_is_down_succeeds_and_import_catches_up(tmp_path, perfctl_env):
    """One real run, its store unreachable: the run succeeds with the warning paragraph, its
    --commit and --label are in run.json, and `history import` adds it with them."""
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    env = {k: v for k, v in perfctl_env.items() if k != "PERFCTL_HISTORY_URL"}
    down = {**env, "PERFCTL_HISTORY_URL": "postgresql://perfctl@127.0.0.1:1/history"}
    run = tmp_path / "one"
    p = perfctl(
        tmp_path,
        down,
        "run",
        "exp.yaml",
        "-q",
        "--no-plots",
        "--commit",
        "f" * 40,
        "--label",
        "branch=main",
        "--out",
        run,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    said = " ".join(p.stdout.split())
    assert "history: this run was not added to the history (history store" in said
    assert f"perfctl history import {run} adds it" in said
    info = json.loads((run / "run.json").read_text())
    assert info["sut"] == {
        "labels": {"branch": "main"},
        "commit": "f" * 40,
        "commit_from": "--commit",
    }

    p = perfctl(tmp_path, env, "history", "import", run)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 run(s) added, 0 already there" in p.stdout
    store = Location(str(tmp_path / "results/history.sqlite"), "test")
    with Store(store, create=False) as st:
        runs = st.runs()
        assert [(r["commit_sha"], r["labels"]) for r in runs] == [("f" * 40, {"branch": "main"})]
        assert len(st.trials()) == 1


def test_a_finished_run_is_added_once(tmp_path):
    run = run_dir(tmp_path / "results/kit/a")
    store = Location(str(tmp_path / "h.sqlite"), "test")
    text, warning = add_finished_run(run, store)
    assert text.startswith("history: added as run ") and not warning
    text, warning = add_finished_run(run, store)
    assert text.startswith("history: already there as run ") and not warning


def test_history_false_adds_nothing():
    text, warning = add_finished_run(Path("/nowhere"), None)
    assert "not added (`history: false`" in text and not warning


def test_a_password_in_history_url_is_refused_before_it_reaches_run_json(tmp_path):
    """run.json keeps the experiment document, so a password written in `history.url` would be
    on disk in every run: the file is refused, exit 2, naming the key and where it belongs."""
    exp = tmp_path / "e.yaml"
    exp.write_text(EXPERIMENT + 'history: {url: "postgresql://ci:s3cretpw@db:5432/perf"}\n')
    p = perfctl(tmp_path, None, "plan", exp)
    assert p.returncode == 2, p.stdout + p.stderr
    out = p.stdout + p.stderr
    assert "history" in out and "PERFCTL_HISTORY_URL" in out and "Traceback" not in out
    assert "s3cretpw" not in out
