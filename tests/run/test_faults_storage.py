"""The results dir failing under a run: disk full (a 200 KiB tmpfs as --out) and the dir
removed mid-run. Either ends with exit 2 and one paragraph naming the path and the fix, no
traceback, finished trials intact, and no process left."""

from __future__ import annotations

import shutil
import subprocess

import pandas as pd
import pytest
from fault_kit import descendants, load_under_way, poll_until, run_processes, still_alive, tiny

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

PY_ONLY = (
    tiny("1s", extra="repeats: 3\n")
    .replace("matrix: {server: [sh, py]}", "matrix: {server: [py]}")
    .replace("workload: {path: /, params: {}}", "workload: {path: /health, params: {}}")
)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 200 KiB tmpfs, unmounted afterwards; skipped where mounting is not permitted."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_disk_full_ends_with_one_paragraph_and_keeps_finished_trials(
    write_yaml, tiny_disk, start_perfctl
):
    out = tiny_disk / "run"
    proc = start_perfctl("run", str(write_yaml(PY_ONLY)), "--out", str(out), "--no-plots")
    tree = {}
    while proc.poll() is None:  # bounded by the run itself (3 one-second trials)
        tree.update(descendants(proc.pid))
        poll_until(lambda: proc.poll() is not None, timeout_s=0.2)
    stdout, stderr = proc.communicate(timeout=60)
    text = stdout + stderr
    assert proc.returncode == 2, text
    assert "Traceback" not in text
    assert f"cannot write {out}" in text and "No space left on device" in text, text
    assert "free space" in text and f"perfctl run --resume {out}" in text, text
    if (out / "trials.csv").is_file():
        finished = pd.read_csv(out / "trials.csv")
        assert list(finished["trial"]) == list(range(1, len(finished) + 1))
    assert poll_until(lambda: not still_alive(tree) and not run_processes(out), timeout_s=10), (
        f"left after the run: {still_alive(tree) + run_processes(out)}"
    )


def test_results_dir_removed_mid_run_ends_with_one_paragraph(write_yaml, tmp_path, start_perfctl):
    out = tmp_path / "run"
    proc = start_perfctl("run", str(write_yaml(PY_ONLY)), "--out", str(out), "--no-plots")
    first = poll_until(lambda: (out / "trials.csv").is_file(), timeout_s=60)
    assert first, "the first trial never finished"
    assert poll_until(
        lambda: any(load_under_way(t) for t in descendants(proc.pid).values()), timeout_s=30
    ), "the second trial never got under way"
    tree = descendants(proc.pid)
    shutil.rmtree(out)
    stdout, stderr = proc.communicate(timeout=60)
    text = stdout + stderr
    assert proc.returncode == 2, text
    assert "Traceback" not in text
    assert f"results dir {out} was removed" in text, text
    assert not (out / "trials.csv").exists(), "trials.csv was written into a removed run dir"
    assert poll_until(lambda: not still_alive(tree) and not run_processes(out), timeout_s=10), (
        f"left after the run: {still_alive(tree) + run_processes(out)}"
    )
