"""A huge matrix: `plan` and `run` count cells without expanding them and refuse more than
matrix.MAX_CELLS at once (naming the count and how to shrink it); below the cap `plan` prints a
summary, not one line per cell. Bounded by the subprocess timeouts, not by a time assertion."""

from __future__ import annotations

from orchestrator.experiment.matrix import MAX_CELLS

TEN = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
HUGE = """
name: huge
servers:
  py: {impl: python, model: async}
load: {mode: closed, connections: 1, duration: 1s, warmup: 0s}
matrix: {a: TEN, b: TEN, c: TEN, d: TEN, e: TEN, f: TEN}
""".replace("TEN", TEN)
BIG = HUGE.replace(", f: " + TEN, "")  # 10^5 cells: at the cap


def test_plan_of_a_million_cells_is_refused_naming_the_count(
    write_yaml, perfctl, assert_clean_error
):
    proc = perfctl("plan", str(write_yaml(HUGE)), timeout=60)
    assert_clean_error(
        proc, "key `matrix`", "1,000,000 cells", f"{MAX_CELLS:,} cells", "Fix: shrink the matrix"
    )


def test_run_refuses_a_million_cells_before_writing_anything(
    write_yaml, perfctl, tmp_path, assert_clean_error
):
    proc = perfctl("run", str(write_yaml(HUGE)), "--out", str(tmp_path / "run"), timeout=60)
    assert_clean_error(proc, "1,000,000 cells")
    assert not (tmp_path / "run").exists()


def test_plan_of_a_hundred_thousand_cells_prints_a_summary(write_yaml, perfctl):
    proc = perfctl("plan", str(write_yaml(BIG)), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "100,000 cells" in proc.stdout and "99,990 more cells" in proc.stdout
    assert "100,000 trials" in proc.stdout
    assert len(proc.stdout.splitlines()) < 60, proc.stdout
