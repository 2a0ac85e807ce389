"""The one owner of the retries of every test marked needs_quiet: how many attempts, the rule
that the host was too busy for an attempt, and the readings printed when every attempt was.

Why: a timing test judges what a busy host distorts (send lateness, a proxy's release, a
driver's maximum rate). On the shared 2-core VMs this suite runs on, CPU steal comes in
spells of seconds, and a neighbour may take a core for a while. Such an attempt proves
nothing either way, so it is taken again, after the host has had a moment to become quiet;
an attempt on a quiet host is judged by the test's own assertions at once. After ATTEMPTS
spoiled attempts the test fails, with every attempt's readings: it never skips, because a
skip would pass a suite that tested nothing.

- `until_quiet(take, spoiled, what)`: the loop. `take(attempt)` measures; `spoiled(reading)`
  says why the host spoiled that reading, or None when it did not.
- `run_spoiled(run_dir)`: that rule for a `perfctl run`: a trial invalid only because the host
  was busy, or one that perfctl's own noise probe called not quiet (steal, foreign CPU).
- `fail_busy(*run_dirs)`: fail a test whose runs still hold host-spoiled trials, with every
  trial's readings; returns when none does.
- `quietly(measure, what)`: the loop for a measurement that is not a run: `measure()` runs
  under a `Watch` (the CPU others took and the hypervisor stole meanwhile), and is taken
  again when that spoiled it.
- `settle()`: between attempts, wait (bounded) for one second in which the host is quiet.

Tests import it as `quiet_kit` (tests/conftest.py puts tests/kits/ on sys.path).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pandas as pd
import psutil
import pytest

from orchestrator.measure import noise

T = TypeVar("T")

# attempts in all before a needs_quiet test fails (CI once read a steal of 25-40% for ~40 s;
# with settle() between attempts, four span a minute or more of such a spell)
ATTEMPTS = 4
# at most this long before another attempt, waiting for a quiet second
SETTLE_S = 30.0
# a second is quiet when the hypervisor took less than perfctl's own "not quiet" bound and the
# host's CPUs were mostly idle (the suite's own process waits meanwhile)
QUIET_STEAL_PCT = noise.MAX_STEAL_PCT
QUIET_BUSY_PCT = 25.0
# a measurement is spoiled when, while it ran, processes other than this test's took this much
# of one CPU, or the hypervisor this share of the CPUs (perfctl's own "not quiet" bounds)
SPOILED_FOREIGN_PCT = 30.0

# a trial invalid for one of these reasons only was spoiled by the host, not by perfctl
HOST_BUSY_REASONS = re.compile(r"host busy|fell behind its schedule")
# a trial invalid for this reason was spoiled by the load generator's own collector: a test of
# what perfctl does with valid trials (compare's gate) takes such a run again (run_spoiled's
# `also`); the generator's pauses are judged where they are the subject (tests/loadgen/)
GENERATOR_PAUSES = re.compile(r"load-generator GC pauses")
NOISE_READINGS = [
    "loop_lag_p99_ms",
    "send_lateness_p99_ms",
    "loadgen_cpu_pct",
    "noise_steal_pct",
    "noise_foreign_cpu_pct",
    "noise_loadgen_runqueue_wait_ms_per_s",
    "noise_server_runqueue_wait_ms_per_s",
    "noise_loadgen_cpu_others_pct",
]


def _cpu_times() -> tuple[float, float, float]:
    """(busy, steal, total) jiffies of all CPUs, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    return user + nice + system + irq + softirq, steal, sum(fields[:8])


def host_reading(window_s: float = 1.0) -> dict[str, float]:
    """The host's CPU over window_s: the share busy (of all CPUs) and the share stolen."""
    b0, s0, t0 = _cpu_times()
    time.sleep(window_s)  # the measured window, not a wait for an event
    b1, s1, t1 = _cpu_times()
    total = max(t1 - t0, 1e-9)
    return {"busy_pct": 100 * (b1 - b0) / total, "steal_pct": 100 * (s1 - s0) / total}


def is_quiet(reading: dict[str, float]) -> bool:
    return reading["steal_pct"] < QUIET_STEAL_PCT and reading["busy_pct"] < QUIET_BUSY_PCT


def settle(max_s: float = SETTLE_S, read=host_reading) -> list[dict[str, float]]:
    """Read the host one second at a time until a quiet second, for at most max_s; returns
    the readings (the failure message shows them). A host that never quiets is no error
    here: the next attempt then judges itself."""
    readings = []
    deadline = time.monotonic() + max_s
    while True:
        r = read()
        readings.append(r)
        if is_quiet(r) or time.monotonic() >= deadline:
            return readings


def _own_cpu_s() -> float:
    """CPU seconds of this process, of its children it reaped, and of its live descendants."""
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    for child in psutil.Process().children(recursive=True):
        try:
            c = child.cpu_times()
            own += c.user + c.system
        except psutil.Error:
            pass  # gone meanwhile: reaped, so counted in children_* next time, or not ours
    return own


class Watch:
    """`with Watch() as w:` reads what the host did while the block ran: the share of one CPU
    that processes other than this test's took (`foreign_pct`), and the share of the CPUs the
    hypervisor stole (`steal_pct`). `w.spoiled()` says why that spoiled a measurement."""

    def __enter__(self) -> Watch:
        self._cpu0, self._own0, self._t0 = _cpu_times(), _own_cpu_s(), time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        (b0, s0, t0), (b1, s1, t1) = self._cpu0, _cpu_times()
        hz = os.sysconf("SC_CLK_TCK")
        wall = max(time.monotonic() - self._t0, 1e-6)
        others_s = max(0.0, (b1 - b0) / hz - (_own_cpu_s() - self._own0))
        self.seconds = wall
        self.foreign_pct = 100 * others_s / wall
        self.steal_pct = 100 * (s1 - s0) / max(t1 - t0, 1e-9)

    def spoiled(self) -> str | None:
        if self.steal_pct < QUIET_STEAL_PCT and self.foreign_pct < SPOILED_FOREIGN_PCT:
            return None
        return (
            f"over {self.seconds:.1f} s others took {self.foreign_pct:.0f}% of a CPU "
            f"(bound {SPOILED_FOREIGN_PCT:g}%), the hypervisor {self.steal_pct:.0f}% "
            f"(bound {QUIET_STEAL_PCT:g}%)"
        )


def quietly(measure: Callable[[], T], what: str, attempts: int = ATTEMPTS) -> T:
    """measure() under a Watch, taken again while the host spoiled it (until_quiet); returns
    the first unspoiled result for the test's own assertions to judge."""

    def take(attempt: int) -> tuple[T, Watch]:
        with Watch() as w:
            result = measure()
        return result, w

    return until_quiet(take, lambda taken: taken[1].spoiled(), what, attempts)[0]


def until_quiet(
    take: Callable[[int], T],
    spoiled: Callable[[T], str | None],
    what: str,
    attempts: int = ATTEMPTS,
    settle_between: Callable[[], list] = settle,
) -> T:
    """take(0), take(1), ... until spoiled(reading) is None, and return that reading: the
    test's own assertions then judge it. spoiled says why the host spoiled a reading (its
    readings in the text); after `attempts` spoiled ones the test fails with every why."""
    tried = []
    for attempt in range(attempts):
        if attempt:
            waited = settle_between()
            if waited:
                last = waited[-1]
                tried[-1] += (
                    f" (then {len(waited)} s until the host read busy "
                    f"{last['busy_pct']:.0f}%, steal {last['steal_pct']:.0f}%)"
                )
        reading = take(attempt)
        why = spoiled(reading)
        if why is None:
            return reading
        tried.append(f"attempt {attempt + 1}: {why}")
    pytest.fail(
        f"the host was too busy for {what} in each of {attempts} attempts:\n" + "\n".join(tried),
        pytrace=False,
    )


def trials(run_dir: Path) -> pd.DataFrame:
    """run_dir's trials.csv, its reason columns as text ('' for none)."""
    reasons = {"invalid_reasons": str, "noise_reasons": str}
    return pd.read_csv(run_dir / "trials.csv", dtype=reasons).fillna(dict.fromkeys(reasons, ""))


def host_busy_trials(run_dir: Path, also: re.Pattern | None = None) -> pd.DataFrame:
    """The trials of run_dir that are invalid only because the host was busy (every one of
    their reasons a HOST_BUSY_REASONS one, or one of `also`)."""
    t = trials(run_dir)

    def spoiled(reason: str) -> bool:
        return bool(HOST_BUSY_REASONS.search(reason) or (also and also.search(reason)))

    only_host = t["invalid_reasons"].map(
        lambda r: bool(r) and all(spoiled(x) for x in r.split("; "))
    )
    return t[~t["valid"].astype(bool) & only_host]


def noise_readings(run_dir: Path) -> str:
    """One line per trial of run_dir: valid and why not, quiet and why not, and the readings
    of the load generator's own checks and of the noise probe."""
    lines = [f"{run_dir.name}:"]
    for _, t in trials(run_dir).iterrows():
        readings = ", ".join(
            f"{c} {t[c]:.3g}" for c in NOISE_READINGS if c in t.index and pd.notna(t[c])
        )
        lines.append(
            f"  trial {t['trial']}: valid={bool(t['valid'])} ({t['invalid_reasons']}); "
            f"quiet={t.get('quiet')} ({t.get('noise_reasons', '')}); {readings}"
        )
    return "\n".join(lines)


def run_spoiled(
    run_dir: Path, need_quiet: bool = True, also: re.Pattern | None = None
) -> str | None:
    """Why the host spoiled run_dir, with every trial's readings; None when it did not. A
    trial invalid only because the host was busy always spoils it; one that perfctl's noise
    probe called not quiet (steal, foreign CPU) spoils it only when the test needs quiet
    trials (need_quiet): a test that judges with --include-noisy needs valid ones. also: more
    reasons that spoil a trial for this test (GENERATOR_PAUSES)."""
    busy = host_busy_trials(run_dir, also)
    loud = trials(run_dir)
    if need_quiet and "quiet" in loud.columns:
        loud = loud[~loud["quiet"].astype(bool)]
    else:
        loud = loud.iloc[:0]
    if busy.empty and loud.empty:
        return None
    return (
        f"{len(busy)} trial(s) invalid only because the host was busy, {len(loud)} not "
        f"quiet; {noise_readings(run_dir)}"
    )


def fail_busy(*run_dirs: Path) -> None:
    """Fail the test, with every trial's readings, when one of run_dirs still holds trials
    invalid only because the host was busy; return otherwise (a trial invalid for another
    reason is the test's own assertions' to judge)."""
    busy = [d for d in run_dirs if not host_busy_trials(d).empty]
    if busy:
        pytest.fail(
            f"the host was too busy for valid trials in {', '.join(d.name for d in busy)}; "
            "the runs read:\n" + "\n".join(noise_readings(d) for d in run_dirs),
            pytrace=False,
        )
