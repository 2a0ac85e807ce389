"""Which trial runs when (run/order.py), how `repeats: auto` stops a cell (run/precision.py,
run/execute.py), and that --resume walks the same order."""

import math

import pytest

from orchestrator.experiment import compile_document
from orchestrator.results import read_trials, write_json
from orchestrator.run import execute
from orchestrator.run.order import trial_order
from orchestrator.run.precision import precision_state


def _plan(**top):
    doc = {
        "name": "order",
        "servers": {"py": {"impl": "python", "model": "async"}},
        "load": {"mode": "closed", "connections": "{c}"},
        "matrix": {"c": [1, 2, 3]},
        "repeats": 3,
        **top,
    }
    return compile_document(doc, "order.yaml")


def _walk(plan, wants=lambda c, k: True):
    return [(plan.cells.index(c), k) for c, k in trial_order(plan, wants)]


def test_interleaved_is_the_default_round_by_round():
    assert _walk(_plan()) == [
        (0, 1),
        (1, 1),
        (2, 1),
        (0, 2),
        (1, 2),
        (2, 2),
        (0, 3),
        (1, 3),
        (2, 3),
    ]


def test_sequential_runs_each_cells_repeats_back_to_back():
    assert _walk(_plan(order="sequential")) == [
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 1),
        (1, 2),
        (1, 3),
        (2, 1),
        (2, 2),
        (2, 3),
    ]


def test_random_shuffles_each_round_with_a_fixed_seed():
    order = _walk(_plan(order="random"))
    assert order == _walk(_plan(order="random"))  # seeded: replays exactly
    rounds = [order[i : i + 3] for i in range(0, 9, 3)]
    assert all(
        sorted(c for c, _ in r) == [0, 1, 2] and {k for _, k in r} == {i + 1}
        for i, r in enumerate(rounds)
    )
    assert len({tuple(c for c, _ in r) for r in rounds}) > 1  # not one fixed permutation


def test_unknown_order_is_a_bad_input():
    from orchestrator.errors import PerfctlError

    with pytest.raises(PerfctlError, match="order"):
        _plan(order="backwards")


def test_repeats_auto_needs_room_for_six_trials():
    from orchestrator.errors import PerfctlError

    with pytest.raises(PerfctlError, match="max_repeats >= 6"):
        _plan(repeats="auto", max_repeats=4)
    assert _plan(repeats="auto", precision="2%").experiment.target_precision == 0.02
    assert _plan(repeats="auto").experiment.target_precision == 0.05


def _row(value, valid=True, quiet=True):
    return {"throughput_rps": value, "valid": valid, "quiet": quiet}


def test_precision_counts_only_valid_quiet_trials():
    rows = [_row(100 + d) for d in (0, 1, -1, 2, -2)]
    assert not precision_state(rows, "throughput_rps", 0.05)["precision_reached"]  # 5 < 6
    state = precision_state(
        rows + [_row(100.5), _row(10, valid=False), _row(500, quiet=False)], "throughput_rps", 0.05
    )
    assert state["precision_trials"] == 6
    assert state["precision_half_width_pct"] == pytest.approx(100 * 2 / 100.25, rel=1e-3)
    assert state["precision_reached"]
    wide = precision_state([_row(v) for v in (50, 100, 150, 100, 100, 100)], "throughput_rps", 0.05)
    assert not wide["precision_reached"] and wide["precision_half_width_pct"] == 50.0
    assert math.isnan(precision_state([], "throughput_rps", 0.05)["precision_half_width_pct"])


class FakeTrials:
    """execute_trial stand-in: cell c's throughput wobbles by up to c% around 1000 req/s."""

    def __init__(self, plan, fail_after=None):
        self.plan, self.calls, self.fail_after = plan, [], fail_after

    def __call__(self, plan, cell, k, run_dir, services=None, on_second=None):
        if self.fail_after is not None and len(self.calls) == self.fail_after:
            raise KeyboardInterrupt
        c = cell.values["c"]
        self.calls.append((plan.cells.index(cell), k))
        wobble = (-1) ** k * c / 200 * (k % 3)
        return {
            "cell_id": cell.cell_id,
            "trial": k,
            "c": c,
            "throughput_rps": 1000 * (1 + wobble),
            "valid": True,
            "quiet": True,
        }


def _run_dir(path, plan):
    """A run directory as `perfctl run` prepares it: created, with its run.json."""
    path.mkdir(parents=True, exist_ok=True)
    write_json(path / "run.json", execute.run_info(plan, {}))
    return path


def test_repeats_auto_stops_each_cell_at_its_precision(tmp_path, monkeypatch):
    """Cell 0 wobbles by up to 1% and reaches 1.5% at 6 trials (the first with an interval);
    cell 2 wobbles by up to 3% and never does, so it runs to max_repeats."""
    plan = _plan(repeats="auto", precision="1.5%", max_repeats=9)
    fake = FakeTrials(plan)
    monkeypatch.setattr(execute, "execute_trial", fake)
    execute.execute_plan(plan, _run_dir(tmp_path, plan))
    per_cell = {i: max(k for c, k in fake.calls if c == i) for i in range(3)}
    assert per_cell[0] == 6 and per_cell[2] == 9
    assert fake.calls[:3] == [(0, 1), (1, 1), (2, 1)]  # interleaved
    trials = read_trials(tmp_path)
    last = trials.groupby("cell_id", sort=False).tail(1).set_index("c")
    assert bool(last.loc[1, "precision_reached"]) and not bool(last.loc[3, "precision_reached"])


def test_resume_keeps_the_order(tmp_path, monkeypatch):
    plan = _plan(order="random", repeats=2)
    whole = FakeTrials(plan)
    monkeypatch.setattr(execute, "execute_trial", whole)
    execute.execute_plan(plan, _run_dir(tmp_path / "whole", plan))
    cut = FakeTrials(plan, fail_after=4)
    monkeypatch.setattr(execute, "execute_trial", cut)
    with pytest.raises(KeyboardInterrupt):
        execute.execute_plan(plan, _run_dir(tmp_path / "cut", plan))
    rest = FakeTrials(plan)
    monkeypatch.setattr(execute, "execute_trial", rest)
    outcome = execute.execute_plan(plan, tmp_path / "cut")
    assert cut.calls + rest.calls == whole.calls and outcome.skipped == 4


def test_run_json_records_the_order():
    info = execute.run_info(_plan(order="random"), {})
    assert info["order"] == "random" and isinstance(info["order_seed"], int)


def test_an_interrupt_swallowed_inside_a_trial_stops_the_run_after_it(tmp_path, monkeypatch):
    """A SIGINT whose KeyboardInterrupt an os.fork hook ate (proc/interrupt.py) still stops the
    run: the trial it landed in is kept, no later trial starts."""
    from orchestrator.proc import interrupt

    plan = _plan(repeats=2)
    fake = FakeTrials(plan)

    def swallowing(*args, **kw):
        row = fake(*args, **kw)
        if len(fake.calls) == 2:
            try:  # what PyErr_WriteUnraisable does to a fork hook's exception
                interrupt.on_signal(2, None)
            except KeyboardInterrupt:
                pass
        return row

    monkeypatch.setattr(execute, "execute_trial", swallowing)
    try:
        with pytest.raises(KeyboardInterrupt):
            execute.execute_plan(plan, _run_dir(tmp_path, plan))
    finally:
        interrupt.handled()
    assert len(fake.calls) == 2 and len(read_trials(tmp_path)) == 2
