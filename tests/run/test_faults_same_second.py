"""Runs started in the same second with the default output each get their own directory:
YYYYmmdd-HHMMSS, then -2, -3, ..., each created atomically (mkdir), never shared."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from orchestrator.results import claim

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

STAMP = "20260101-120000"


def _claim(base: str, queue) -> None:
    claim.time.strftime = lambda fmt: STAMP  # every process in the same second
    queue.put(str(claim.new_run_dir("exp", claim.Path(base))))


def test_runs_started_in_the_same_second_get_distinct_dirs(tmp_path, monkeypatch):
    monkeypatch.setattr(claim.time, "strftime", lambda fmt: STAMP)
    first = claim.new_run_dir("exp", tmp_path)
    second = claim.new_run_dir("exp", tmp_path)
    assert (first.name, second.name) == (STAMP, f"{STAMP}-2")
    assert first.is_dir() and second.is_dir()


@pytest.mark.usefixtures("live")
def test_concurrent_runs_in_the_same_second_never_share_a_dir(tmp_path):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(tmp_path), queue)) for _ in range(8)]
    for p in procs:
        p.start()
    dirs = [queue.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(30)
    assert len(set(dirs)) == 8, dirs
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == sorted(
        [STAMP] + [f"{STAMP}-{n}" for n in range(2, 9)]
    )


@pytest.mark.parametrize("name", ["..", "."])
def test_a_run_dir_is_always_inside_the_results_root(name, tmp_path):
    with pytest.raises(claim.PerfctlError, match="outside"):
        claim.new_run_dir(name, tmp_path / "results")
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["results"])
