"""pytest plugin: `pytest --perf-run RUN_DIR [--perf-thresholds FILE]` turns every threshold x
matching cell of a run into its own test case, e.g.

    perf-run::threshold-1[p99_ms<5 | server=c-pool, rate=1000]  PASSED

so CI shows which cell breached which bound. `pytest --perf-history EXPERIMENT` gates on the
performance history the same way: each series (cell x metric on the newest run's host) is a
test case that fails when the newest runs sit after a regression beyond the tolerance and
skips when the evidence is too thin (`perfctl history check`'s exit 1 and 3), e.g.

    perf-history::history[throughput | server=pool]  FAILED

Without --perf-run or --perf-history the plugin adds nothing. With either and no test paths
on the command line, only the plugin's cases run (the project's `testpaths` are not
collected, from whichever directory pytest starts); name test paths as well to run them
beside them.
Registered as the `perfctl` pytest11 entry point; or load it with
`-p orchestrator.analysis.pytest_plugin`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ..errors import PerfctlError
from ..history import trend
from ..history.store import Store, locate
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
        "--perf-history",
        metavar="EXPERIMENT",
        default=None,
        help="One test per series of the experiment in the performance history: fails on a "
        "regression in the trend, skips when the evidence is too thin.",
    )
    group.addoption(
        "--perf-history-store",
        metavar="PATH|URL",
        default=None,
        help="The history store (default: $PERFCTL_HISTORY_URL, else results/history.sqlite).",
    )
    group.addoption(
        "--perf-history-tolerance",
        type=float,
        default=trend.TOLERANCE,
        help="Relative change a regression must exceed (default 0.05).",
    )
    group.addoption(
        "--perf-include-noisy",
        action="store_true",
        default=False,
        help="Average valid trials the host disturbed too (default: valid, quiet).",
    )


def pytest_ignore_collect(collection_path, config):
    """With --perf-run or --perf-history and no paths named by the user, collect no test
    files at all."""
    if not config.getoption("--perf-run") and not config.getoption("--perf-history"):
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


class HistoryItem(pytest.Item):
    def __init__(self, *, verdict: trend.Verdict, **kw) -> None:
        super().__init__(**kw)
        self.verdict = verdict

    def runtest(self) -> None:
        if self.verdict.status == "thin":
            pytest.skip(self.verdict.text)
        if self.verdict.status == "regression":
            raise ThresholdFailure(self.verdict.text)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ThresholdFailure):
            return f"regression in the history: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"perf-history: {self.name}"


def _history_items(session, config) -> list[pytest.Item]:
    experiment = config.getoption("--perf-history")
    try:
        with Store(locate(config.getoption("--perf-history-store")), create=False) as store:
            verdicts = trend.check(
                store,
                experiment,
                tolerance=config.getoption("--perf-history-tolerance"),
                include_noisy=config.getoption("--perf-include-noisy"),
            )
    except PerfctlError as e:
        raise pytest.UsageError(f"--perf-history: {e}") from None
    if not verdicts:
        raise pytest.UsageError(
            f"--perf-history {experiment}: the history holds no usable runs of it. Fix: check "
            "the name (perfctl history show lists them) or --perf-history-store."
        )
    return list(
        HistoryCollector.from_parent(session, name="perf-history", verdicts=verdicts).collect()
    )


class HistoryCollector(pytest.Collector):
    def __init__(self, *, verdicts: list[trend.Verdict], **kw) -> None:
        super().__init__(**kw)
        self.verdicts = verdicts

    def collect(self):
        for v in self.verdicts:
            name = f"history[{v.series.metric} | {v.series.cell_label}]"
            yield HistoryItem.from_parent(self, name=name, verdict=v)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    if config.getoption("--perf-history"):
        items.extend(_history_items(session, config))
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
