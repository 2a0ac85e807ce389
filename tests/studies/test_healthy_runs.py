"""A healthy run looks healthy: each seed study's quick run goes through run, load, report,
check, compare and model, and no line of theirs says damaged, skipped, warning or Traceback;
the report has no such block (tests/kits/healthy_kit.py; the default experiment's run:
tests/e2e/test_default_experiment_healthy.py).

The runs are the study tests' own (conftest.run_quick_profile keeps one per study for the
session), so this costs the commands, not more trials. The run itself is checked where it is
made (run_quick_profile)."""

from __future__ import annotations

import pytest
from healthy_kit import assert_every_command_is_quiet

from .conftest import QUICK_OVERRIDES

JAVA = {"littles_law", "registry_burst"}


@pytest.mark.parametrize("study", sorted(QUICK_OVERRIDES))
def test_every_command_on_a_quick_run_prints_nothing_alarming(study, study_run, request, tmp_path):
    if study in JAVA:
        request.getfixturevalue("require_java")
    assert_every_command_is_quiet(study_run(study), tmp_path)
