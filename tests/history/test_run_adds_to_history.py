"""A finished `perfctl run` lands in the history with its --commit and --label; when the store
cannot be written the run still succeeds, a warning paragraph names `history import`, and
that import catches up; `history: false` keeps a run out."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.history.add import add_finished_run
from orchestrator.history.store import Location, Store

PERFCTL = str(Path(sys.executable).parent / "perfctl")
EXPERIMENT = """
name: hist
servers: {pool: {impl: c, model: pool, threads: 2}}
workload: {path: /work, params: {spin_us: 100}}
load: {mode: closed, connections: 2, duration: 500ms, warmup: 100ms}
repeats: 2
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


def perfctl(cwd: Path, env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PERFCTL, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_a_run_is_added_and_a_failed_add_is_caught_up_by_import(tmp_path, perfctl_env):
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    env = {k: v for k, v in perfctl_env.items() if k != "PERFCTL_HISTORY_URL"}
    p = perfctl(
        tmp_path,
        env,
        "run",
        "exp.yaml",
        "-q",
        "--no-plots",
        "--commit",
        "f" * 40,
        "--label",
        "branch=main",
        "--out",
        tmp_path / "one",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "history: added as run" in p.stdout
    info = json.loads((tmp_path / "one/run.json").read_text())
    assert info["sut"] == {
        "labels": {"branch": "main"},
        "commit": "f" * 40,
        "commit_from": "--commit",
    }
    store = Location(str(tmp_path / "results/history.sqlite"), "test")
    with Store(store, create=False) as st:
        runs = st.runs()
        assert [(r["commit_sha"], r["labels"]) for r in runs] == [("f" * 40, {"branch": "main"})]
        assert len(st.trials()) == 2

    down = {**env, "PERFCTL_HISTORY_URL": "postgresql://perfctl@127.0.0.1:1/history"}
    p = perfctl(tmp_path, down, "run", "exp.yaml", "-q", "--no-plots", "--out", tmp_path / "two")
    assert p.returncode == 0, p.stdout + p.stderr
    said = " ".join(p.stdout.split())
    assert "history: this run was not added to the history (history store" in said
    assert f"perfctl history import {tmp_path / 'two'} adds it" in said
    assert (tmp_path / "two/trials.csv").is_file()

    p = perfctl(tmp_path, env, "history", "import", tmp_path / "one", tmp_path / "two")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 run(s) added, 1 already there" in p.stdout
    with Store(store, create=False) as st:
        assert len(st.runs()) == 2


def test_history_false_adds_nothing():
    text, warning = add_finished_run(Path("/nowhere"), None)
    assert "not added (`history: false`" in text and not warning
