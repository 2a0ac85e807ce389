"""What a healthy run never prints, and every command on it (issue 40: every healthy run printed
"skipped: ... endpoints.csv is damaged" while nothing was). The study tier checks the five
studies' quick runs with it (tests/studies/test_healthy_runs.py); the untimed live tier the
default experiment's (tests/e2e/test_default_experiment_healthy.py)."""

from __future__ import annotations

import re
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cli_kit import perfctl

ALARMING = re.compile(r"damaged|skipped|warning|traceback", re.IGNORECASE)


def alarming_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if ALARMING.search(line)]


def assert_every_command_is_quiet(run: Path, tmp_path: Path) -> None:
    """load, report, check, compare RUN RUN and model on run: each ends as a healthy run's
    should, and no line of theirs, nor of report.html, is alarming."""
    from orchestrator import results

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
        lanes = pool.map(lane, [("report", "model"), ("check", "compare")])
        done = [p for lane_ in lanes for p in lane_]
    assert sorted(n for n, _ in done) == sorted(commands)
    for name, proc in done:
        out = proc.stdout + proc.stderr
        assert proc.returncode in commands[name][1], (name, out[-3000:])
        assert not alarming_lines(out), (name, alarming_lines(out))
    page = (run / "report.html").read_text()
    assert not alarming_lines(page), alarming_lines(page)
