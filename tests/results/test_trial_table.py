"""TrialTable: a perfctl killed between writing trials.parquet and trials.csv keeps the trial."""

import os

import pandas as pd
import pytest

from orchestrator.results import schema
from orchestrator.results.write import TrialTable


class Killed(BaseException):
    """Stands for SIGKILL arriving between the two renames (nothing after it runs)."""


def _row(i: int) -> dict:
    return {"cell_id": f"c{i}", "trial": 1, "requests": 100 + i, "valid": True}


def test_a_kill_between_the_two_renames_keeps_the_trial_and_levels_the_csv(tmp_path, monkeypatch):
    (tmp_path / "run.json").write_text("{}")
    table = TrialTable(tmp_path)
    table.append(_row(1))
    real_replace, calls = os.replace, []

    def replace_then_die(src, dst):
        calls.append(str(dst))
        if len(calls) == 2:  # the second of the two renames
            raise Killed
        real_replace(src, dst)

    monkeypatch.setattr(schema.os, "replace", replace_then_die)
    with pytest.raises(Killed):
        table.append(_row(2))
    monkeypatch.setattr(schema.os, "replace", real_replace)

    reopened = TrialTable(tmp_path)  # what --resume does
    assert reopened.done() == {("c1", 1), ("c2", 1)}, "the finished trial would be run again"
    assert len(pd.read_csv(tmp_path / "trials.csv")) == 2


def test_a_kill_before_the_first_csv_keeps_the_first_trial(tmp_path, monkeypatch):
    (tmp_path / "run.json").write_text("{}")
    real_replace, calls = os.replace, []

    def replace_then_die(src, dst):
        calls.append(str(dst))
        if len(calls) == 2:
            raise Killed
        real_replace(src, dst)

    monkeypatch.setattr(schema.os, "replace", replace_then_die)
    with pytest.raises(Killed):
        TrialTable(tmp_path).append(_row(1))
    monkeypatch.setattr(schema.os, "replace", real_replace)
    assert TrialTable(tmp_path).done() == {("c1", 1)}
    assert (tmp_path / "trials.csv").is_file()
