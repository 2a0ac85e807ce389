"""Where a run writes: --out takes a new or empty directory only; an existing run is finished
with --resume only, and --resume refuses a run whose experiment or config changed, or that
another perfctl is writing. A refusal writes nothing."""

from __future__ import annotations

import os
import shutil

import pytest
from fault_kit import mark_of, tiny

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

ONE_TRIAL = (
    tiny("0.5s")
    .replace("matrix: {server: [sh, py]}", "matrix: {server: [py]}")
    .replace("workload: {path: /, params: {}}", "workload: {path: /health, params: {}}")
)
DIES_AT_START = """
name: other
servers:
  s: {cmd: "sh -c 'exit 3' {port}"}
"""


def _snapshot(d) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


_FINISHED: dict = {}


@pytest.fixture
def finished_run(tmp_path_factory, perfctl):
    """A finished one-trial run, made once for this module; tests work on copies."""
    if "base" not in _FINISHED:
        base = tmp_path_factory.mktemp("finished")
        (base / "exp.yaml").write_text(ONE_TRIAL)
        proc = perfctl("run", str(base / "exp.yaml"), "--out", str(base / "run"), "--no-plots")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        _FINISHED["base"] = base
    return _FINISHED["base"]


@pytest.fixture
def run_copy(finished_run, tmp_path):
    shutil.copytree(finished_run, tmp_path / "copy")
    return tmp_path / "copy"


def test_out_into_an_existing_run_is_refused_and_changes_nothing(
    run_copy, write_yaml, perfctl, assert_clean_error
):
    run = run_copy / "run"
    before = _snapshot(run)
    proc = perfctl("run", str(write_yaml(DIES_AT_START)), "--out", str(run))
    assert_clean_error(
        proc, f"--out {run}", "already holds a run", "'faults'", f"perfctl run --resume {run}"
    )
    assert _snapshot(run) == before


def test_out_takes_only_a_new_or_empty_folder(tmp_path, write_yaml, perfctl, assert_clean_error):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "thesis.txt").write_text("precious")
    exp = write_yaml(DIES_AT_START)
    proc = perfctl("run", str(exp), "--out", str(folder))
    assert_clean_error(proc, f"--out {folder}", "not empty and is not a perfctl run")
    assert sorted(p.name for p in folder.iterdir()) == ["thesis.txt"]
    (folder / "thesis.txt").unlink()  # now empty: used
    proc = perfctl("run", str(exp), "--out", str(folder))
    assert_clean_error(proc, "exited with status 3 during start-up")  # past the dir check
    assert (folder / "run.json").is_file()


def test_resume_refuses_a_changed_experiment_naming_the_difference(
    run_copy, perfctl, assert_clean_error
):
    run = run_copy / "run"
    before = _snapshot(run)
    changed = run_copy / "exp.yaml"
    changed.write_text(ONE_TRIAL.replace("duration: 0.5s", "duration: 0.7s"))
    proc = perfctl("run", str(changed), "--resume", str(run))
    assert_clean_error(proc, f"--resume {run}", "`load.duration_s` is 0.5 in the run but 0.7 now")
    proc = perfctl("run", "--resume", str(run), "--set", "repeats=3")
    assert_clean_error(proc, "`repeats` is 1 in the run but 3 now")
    other = run_copy / "other.yaml"
    other.write_text(DIES_AT_START)
    proc = perfctl("run", str(other), "--resume", str(run))
    assert_clean_error(proc, "`experiment` is 'faults' in the run but 'other' now")
    assert _snapshot(run) == before
    changed.write_text(ONE_TRIAL)  # as it was: resumed (nothing left to run)
    proc = perfctl("run", str(changed), "--resume", str(run), "--no-plots")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(0 run, 1 already recorded)" in proc.stdout


def test_resume_of_a_run_that_another_perfctl_is_writing_is_refused(
    run_copy, perfctl, assert_clean_error
):
    run = run_copy / "run"
    (run / "children.json").write_text(
        f'{{"supervisor": "{mark_of(os.getpid())}", "children": [], "cleanup": {{}}}}'
    )
    proc = perfctl("run", "--resume", str(run))
    assert_clean_error(proc, f"perfctl (pid {os.getpid()}) is running this run right now")
