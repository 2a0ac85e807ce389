"""run/retry.py: a trial the host spoiled is taken again (retry_noisy), every attempt kept."""

from __future__ import annotations

import pandas as pd

from orchestrator.experiment import compile_document
from orchestrator.results import read_trials, write_json
from orchestrator.results.claim import trial_dir
from orchestrator.run import execute
from orchestrator.run.retry import RETRIED_FILE, spoiled_by_host


def _plan(**top):
    doc = {
        "name": "retry",
        "servers": {"py": {"impl": "python", "model": "async"}},
        "load": {"mode": "closed", "connections": "{c}"},
        "matrix": {"c": [1, 2]},
        "repeats": 2,
        **top,
    }
    return compile_document(doc, "retry.yaml")


def _run_dir(path, plan):
    path.mkdir(parents=True, exist_ok=True)
    write_json(path / "run.json", execute.run_info(plan, {}))
    return path


class SpoiledTrials:
    """execute_trial stand-in: cell c=2's trial 1 is spoiled `spoiled` times (not quiet, then
    invalid for the generator's GC pauses), each attempt writing a file in its trial dir."""

    def __init__(self, spoiled: int):
        self.spoiled, self.calls = spoiled, []

    def __call__(self, plan, cell, k, run_dir, services=None, on_second=None):
        c = cell.values["c"]
        self.calls.append((c, k))
        n = sum(1 for call in self.calls if call == (c, k))
        tdir = trial_dir(run_dir, cell.cell_id, k)
        tdir.mkdir(parents=True, exist_ok=True)
        (tdir / "requests.parquet").write_text(f"attempt {n}")
        row = {"cell_id": cell.cell_id, "trial": k, "c": c, "throughput_rps": 1000.0}
        row.update(valid=True, invalid_reasons="", quiet=True, noise_reasons="")
        if (c, k) == (2, 1) and n <= self.spoiled:
            if n % 2:
                row.update(quiet=False, noise_reasons="CPU steal 9.1% > 5%")
            else:
                row.update(
                    valid=False,
                    invalid_reasons="load-generator GC pauses (longest 1.0 ms) moved the p99 "
                    "latency by up to 9% (...). Fix: pin the load generator",
                )
        return row


def test_a_spoiled_trial_is_taken_again_and_every_attempt_is_kept(tmp_path, monkeypatch):
    plan = _plan(retry_noisy=2)
    fake = SpoiledTrials(spoiled=1)
    monkeypatch.setattr(execute, "execute_trial", fake)
    retried = []
    outcome = execute.execute_plan(
        plan, _run_dir(tmp_path, plan), on_retry=lambda *a: retried.append(a[1:])
    )
    assert fake.calls.count((2, 1)) == 2 and len(fake.calls) == 5
    assert outcome.retried == 1 and outcome.retry_s >= 0
    assert retried == [("not quiet: CPU steal 9.1% > 5%", 2, 3)]
    trials = read_trials(tmp_path)
    assert len(trials) == 4  # one row per trial: the last attempt's
    row = trials[(trials["c"] == 2) & (trials["trial"] == 1)].iloc[0]
    assert row["attempts"] == 2 and bool(row["quiet"])
    assert "attempt 1: not quiet: CPU steal" in row["retried_why"]
    kept = pd.read_csv(tmp_path / RETRIED_FILE)
    assert len(kept) == 1 and kept.loc[0, "attempt"] == 1 and not bool(kept.loc[0, "quiet"])
    assert (tmp_path / kept.loc[0, "attempt_dir"] / "requests.parquet").read_text() == "attempt 1"
    cell = row["cell_id"]
    assert (trial_dir(tmp_path, cell, 1) / "requests.parquet").read_text() == "attempt 2"


def test_retries_are_bounded_and_the_last_attempt_stays_as_it_is(tmp_path, monkeypatch):
    plan = _plan(retry_noisy=2)
    fake = SpoiledTrials(spoiled=10)
    monkeypatch.setattr(execute, "execute_trial", fake)
    outcome = execute.execute_plan(plan, _run_dir(tmp_path, plan))
    assert fake.calls.count((2, 1)) == 3 and outcome.retried == 2
    row = read_trials(tmp_path).query("c == 2 and trial == 1").iloc[0]
    assert row["attempts"] == 3 and not bool(row["quiet"])  # attempt 3: spoiled again, kept
    assert "attempt 2: invalid for the load generator's own stalls" in row["retried_why"]
    assert len(pd.read_csv(tmp_path / RETRIED_FILE)) == 2


def test_retry_noisy_0_never_retries(tmp_path, monkeypatch):
    plan = _plan(retry_noisy=0)
    fake = SpoiledTrials(spoiled=1)
    monkeypatch.setattr(execute, "execute_trial", fake)
    assert execute.execute_plan(plan, _run_dir(tmp_path, plan)).retried == 0
    assert len(fake.calls) == 4 and not (tmp_path / RETRIED_FILE).exists()


def test_what_counts_as_spoiled_by_the_host():
    assert spoiled_by_host({"quiet": False, "noise_reasons": "steal"}) == "not quiet: steal"
    assert spoiled_by_host({"quiet": True, "valid": True, "invalid_reasons": ""}) == ""
    lag = "load-generator event-loop lag p99 9.0 ms > 5.0 ms (...): host busy. Fix: ..."
    assert spoiled_by_host({"quiet": True, "invalid_reasons": lag}).startswith("invalid for")
    # the server's failures and a generator behind its schedule are not the host's doing,
    # and a trial that failed so is kept as it is even when the host was noisy too (a server
    # killed mid-trial, a database stopped, a cluster host lost: each also disturbs the host)
    for quiet in (True, False):
        died = {"quiet": quiet, "valid": False, "invalid_reasons": "server died (exit -9)"}
        assert spoiled_by_host(died) == "", quiet
    for reason in (
        "error rate 5.00% > 1% (refused 12): the server failed requests. Fix: ...",
        f"{lag}; error rate 5.00% > 1% (refused 12). Fix: ...",
        "send lateness (p99 2.00 ms) moved the p50 latency by up to 9%. Fix: ...",
    ):
        assert spoiled_by_host({"quiet": True, "invalid_reasons": reason}) == "", reason


def test_the_default_comes_from_the_environment_and_a_bad_value_is_named(monkeypatch):
    import pytest

    from orchestrator.errors import PerfctlError

    monkeypatch.delenv("PERFCTL_RETRY_NOISY", raising=False)
    assert _plan().experiment.retry_noisy == 2
    monkeypatch.setenv("PERFCTL_RETRY_NOISY", "0")
    assert _plan().experiment.retry_noisy == 0
    assert _plan(retry_noisy=1).experiment.retry_noisy == 1  # the file's own key wins
    monkeypatch.setenv("PERFCTL_RETRY_NOISY", "lots")
    with pytest.raises(PerfctlError, match="PERFCTL_RETRY_NOISY='lots'.*Fix:"):
        _plan()
