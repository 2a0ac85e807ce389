"""A healthy run looks healthy: each example experiment's quick run (the five studies and the
default experiments.yaml) goes through run, load, report, check, compare and model, and no
line of theirs says damaged, skipped, warning or Traceback; the report has no such block.

The runs are the study tests' own (conftest.run_quick_profile keeps one per study for the
session), so this costs the commands, not more trials. The run itself is checked where it is
made (run_quick_profile)."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
from cli_kit import perfctl

from orchestrator import results

from .conftest import QUICK_OVERRIDES, alarming_lines

JAVA = {"littles_law", "registry_burst"}


@pytest.mark.parametrize("study", sorted(QUICK_OVERRIDES))
def test_every_command_on_a_quick_run_prints_nothing_alarming(study, study_run, request, tmp_path):
    if study in JAVA:
        request.getfixturevalue("require_java")
    run = study_run(study)
    # load: every table of the run reads, with no warning and nothing called damaged
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = results.load(run)
        for table in ("trials", "requests", "endpoints", "timeline"):
            getattr(loaded, table)
        assert loaded.damaged() == []
    # check: the experiment's own thresholds, or a wide gate where it has none
    gate = () if loaded.info["document"].get("thresholds") else ("-t", tmp_path / "gate.yaml")
    (tmp_path / "gate.yaml").write_text("thresholds:\n  - {error_rate: {le: 1.0}}\n")
    commands = {
        "report": (("report", run), (0,)),
        "check": (("check", run, *gate), (0, 1, 3)),  # a breach or thin evidence is a verdict
        "compare": (("compare", run, run), (0, 1, 3)),
        "model": (("model", run), (0,)),
    }

    def lane(names: tuple[str, ...]) -> list[tuple[str, object]]:
        return [(n, perfctl(*commands[n][0], timeout=300)) for n in names]

    # two at a time, as they time nothing: report and model write into the run (one after
    # the other), check and compare only read it
    with ThreadPoolExecutor(2) as pool:
        done = [
            p
            for lane_ in pool.map(lane, [("report", "model"), ("check", "compare")])
            for p in lane_
        ]
    assert sorted(n for n, _ in done) == sorted(commands)
    for name, proc in done:
        out = proc.stdout + proc.stderr
        assert proc.returncode in commands[name][1], (name, out[-3000:])
        assert not alarming_lines(out), (name, alarming_lines(out))
    page = (run / "report.html").read_text()
    assert not alarming_lines(page), alarming_lines(page)
