"""cluster/stalls.py on merged requests.parquet files as merge.py writes them: one host's shard
silent for 3 s while the other goes on is a cut (named, with its length); both silent (a
server pause) is not; a short silence within the bound is not; a stall wholly in the warm-up
does not count; one shard alone has no verdict."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchestrator.cluster.stalls import cut_off_reasons

# untimed: stalls read from the requests' timestamps in files, not how fast it ran (tests/conftest.py)
pytestmark = pytest.mark.untimed

START = 10_000_000_000
WARMUP = 1_000_000_000
WINDOW = 6_000_000_000
RATE = 500  # per host, requests per second


def _rows(host: str, silent: list[tuple[float, float]], seed: int) -> pd.DataFrame:
    """An open-loop shard at RATE over warm-up and window, latencies ~1 ms; a request due
    while the host is silent (s from the start) completes only when the silence ends."""
    rng = np.random.default_rng(seed)
    n = int(RATE * (WARMUP + WINDOW) / 1e9)
    intended = START + np.sort(rng.integers(0, WARMUP + WINDOW, n))
    done = intended + rng.integers(500_000, 1_500_000, n)
    for a, b in silent:
        lo, hi = START + int(a * 1e9), START + int(b * 1e9)
        held = (done >= lo) & (intended < hi)
        done[held] = hi + rng.integers(0, 1_000_000, held.sum())
    return pd.DataFrame({"intended_ns": intended, "done_ns": done, "host": host})


def _reasons(tmp_path, silent_h2, silent_h3, hosts=("h2", "h3")):
    frames = [_rows("h2", silent_h2, 1), _rows("h3", silent_h3, 2)]
    path = tmp_path / "requests.parquet"
    pd.concat([f for f in frames if f["host"].iloc[0] in hosts]).to_parquet(path, index=False)
    return cut_off_reasons(path, list(hosts), START, START + WARMUP, START + WARMUP + WINDOW)


def test_one_host_silent_for_3s_while_the_other_goes_on_is_named_with_its_length(tmp_path):
    (reason,) = _reasons(tmp_path, [], [(3.0, 6.0)])
    assert reason.startswith("host h3 was cut off for 3.0 s during the measure window"), reason
    assert "while h2 went on" in reason


def test_a_cut_that_began_in_the_warmup_says_how_much_of_it_was_in_the_window(tmp_path):
    (reason,) = _reasons(tmp_path, [(0.5, 3.0)], [])
    assert "host h2 was cut off for 2.5 s during the load (2.0 s of it in the measure" in reason


def test_every_host_silent_at_once_is_a_server_pause_not_a_cut(tmp_path):
    assert _reasons(tmp_path, [(3.0, 6.0)], [(3.0, 6.0)]) == []


def test_a_silence_within_the_bound_and_no_silence_are_not_cuts(tmp_path):
    assert _reasons(tmp_path, [], [(3.0, 3.8)]) == []
    assert _reasons(tmp_path, [], []) == []


def test_a_silence_wholly_in_the_warmup_does_not_count(tmp_path):
    assert _reasons(tmp_path, [], [(-0.1, 0.95)]) == []


def test_one_shard_alone_has_no_verdict(tmp_path):
    assert _reasons(tmp_path, [], [(3.0, 6.0)], hosts=("h3",)) == []
