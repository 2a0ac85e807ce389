"""pytest plugin: `pytest --perf-run RUN_DIR [--perf-thresholds FILE]` turns every threshold x
matching cell of a run into its own test case, e.g.

    perf-run::threshold-1[p99_ms<5 | server=c-pool, rate=1000]  PASSED

so CI shows which cell breached which bound. Without --perf-run the plugin adds nothing.
With --perf-run and no test paths on the command line, only the threshold cases run (the
project's `testpaths` are not collected, from whichever directory pytest starts); name test
paths as well to run them beside the threshold cases.
Registered as the `perfctl` pytest11 entry point; or load it with
`-p orchestrator.analysis.pytest_plugin`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ..errors import PerfctlError
from . import check


def pytest_addoption(parser) -> None:
    group = parser.getgroup("perfctl")
    group.addoption(
        "--perf-run",
        metavar="RUN_DIR",
        default=None,
        help="perfctl results dir: one test per threshold x matching cell.",
    )
    group.addoption(
        "--perf-thresholds",
        metavar="FILE",
        default=None,
        help="YAML thresholds to use instead of the run's experiment file.",
    )
    group.addoption(
        "--perf-include-noisy",
        action="store_true",
        default=False,
        help="Average valid trials the host disturbed too (default: valid, quiet).",
    )


def pytest_ignore_collect(collection_path, config):
    """With --perf-run and no paths named by the user, collect no test files at all."""
    if not config.getoption("--perf-run"):
        return None
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return None
    return True


class ThresholdFailure(Exception):
    pass


class ThresholdItem(pytest.Item):
    def __init__(self, *, verdict: check.Verdict, **kw) -> None:
        super().__init__(**kw)
        self.verdict = verdict

    def runtest(self) -> None:
        v = self.verdict
        if not v.passed:
            value = "no value" if math.isnan(v.measured) else f"{v.measured:.6g}"
            why = "; ".join(x for x in (v.note, v.usage) if x)
            why = f" ({why})" if why else ""
            raise ThresholdFailure(
                f"{v.cell_label}: {v.threshold.column} = {value}, needs {v.threshold.text}{why}"
            )

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ThresholdFailure):
            return f"threshold breached: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"perf-run: {self.name}"


class PerfRunCollector(pytest.Collector):
    def __init__(self, *, verdicts: list[check.Verdict], **kw) -> None:
        super().__init__(**kw)
        self.verdicts = verdicts

    def collect(self):
        seen: dict[str, int] = {}
        for v in self.verdicts:
            th = v.threshold
            bound = f"{th.metric}{check.OPERATORS[th.op][1]}{th.limit:g}"
            name = f"threshold-{th.index}[{bound} | {v.cell_label}]"
            n = seen.get(name, 0)
            seen[name] = n + 1
            yield ThresholdItem.from_parent(
                self, name=name if n == 0 else f"{name}#{n + 1}", verdict=v
            )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    run_dir = config.getoption("--perf-run")
    if not run_dir:
        return
    file = config.getoption("--perf-thresholds")
    try:
        verdicts = check.check_run(
            Path(run_dir), Path(file) if file else None, config.getoption("--perf-include-noisy")
        )
    except PerfctlError as e:
        raise pytest.UsageError(f"--perf-run: {e}") from None
    if not verdicts:
        raise pytest.UsageError(
            f"--perf-run {run_dir}: the run has no thresholds. Fix: add "
            "`thresholds:` to the experiment or pass --perf-thresholds FILE."
        )
    collector = PerfRunCollector.from_parent(session, name="perf-run", verdicts=verdicts)
    items.extend(collector.collect())
