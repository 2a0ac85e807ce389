"""The default experiment (`make run`'s experiments.yaml), its quick run: it succeeds, and it
and every command on it (load, report, check, compare, model) print nothing alarming
(tests/kits/healthy_kit.py). Before issue 40 every healthy run printed six "damaged" lines.
The seed studies' runs are checked the same way in the study tier (tests/studies/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_kit import perfctl
from healthy_kit import alarming_lines, assert_every_command_is_quiet

ROOT = Path(__file__).resolve().parents[2]

# untimed: asserts what perfctl prints, not how fast, so it runs beside another test
# (tests/conftest.py); a noisy trial says "noisy", which is not alarming
pytestmark = pytest.mark.untimed


def test_the_default_experiments_quick_run_and_every_command_on_it_print_nothing_alarming(
    tmp_path,
):
    out = tmp_path / "run"
    proc = perfctl(
        "run", ROOT / "experiments.yaml", "--profile", "quick", "--out", out, timeout=420
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert not alarming_lines(output), alarming_lines(output)
    assert_every_command_is_quiet(out, tmp_path)
