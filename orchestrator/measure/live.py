"""What a trial is doing, second by second, while it runs: the load generator's live files
(loadgen/live.py: live.jsonl, or live-<i>.jsonl per worker process) tailed, joined with the
resource sampler's newest readings of the server's CPU and of host noise.

Nothing here is a result: trials.csv comes from the raw rows after the trial. A second is
reported once every worker process has written it (or a later one).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from loadgen.floats import float_or_nan

from ..numbers import fmt
from . import noise

LIVE_GLOB = "live*.jsonl"


@dataclass(frozen=True)
class LiveSecond:
    """One second of one trial, summed over the load generator's worker processes."""

    second: int
    phase: str  # warmup | measure | drain
    ok: int  # requests answered in this second
    errors: int
    p50_ms: float  # of this second's answers (the slowest worker's; NaN: none)
    p99_ms: float
    lateness_p99_ms: float  # sent - intended of this second's sends (NaN: none)
    server_cpu_pct: float = math.nan  # the sampler's newest reading
    noisy: str | None = None  # why the host was not quiet in the last second, "" if it was,
    # None when not measured

    def line(self) -> str:
        """The one-line view, the host's verdict first so that a narrow terminal, which cuts
        the line's end, never cuts it; a noise reason last. The send lateness is in µs, its
        scale on a working generator (a typical line fits an 80-column terminal with rich's
        indent): `measure 3s quiet 1.02k req/s p50 0.412 p99 2.31ms 0 err cpu 97% late 51µs`."""
        verdict = "noise ?" if self.noisy is None else "NOISY" if self.noisy else "quiet"
        return (
            f"{self.phase} {self.second}s {verdict} {fmt(self.ok)} req/s "
            f"p50 {fmt(self.p50_ms)} p99 {fmt(self.p99_ms)}ms "
            f"{fmt(self.errors)} err cpu {fmt(self.server_cpu_pct, '.0f')}% "
            f"late {fmt(self.lateness_p99_ms * 1000)}µs" + (f": {self.noisy}" if self.noisy else "")
        )


class LiveTail:
    """Reads the complete lines added to a trial directory's live files since the last call."""

    def __init__(self, trial_dir: Path) -> None:
        self.trial_dir = Path(trial_dir)
        self._offsets: dict[Path, int] = {}
        self._partial: dict[int, list[dict]] = {}  # second -> lines (one per worker)
        self._latest: dict[int, int] = {}  # worker -> newest second read
        self._reported = -1

    def _read_new(self) -> list[dict]:
        lines = []
        for path in sorted(self.trial_dir.glob(LIVE_GLOB)):
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets.get(path, 0))
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # complete lines only
            self._offsets[path] = self._offsets.get(path, 0) + end
            for raw in data[:end].splitlines():
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    continue
        return lines

    def poll(self) -> list[dict]:
        """The seconds every worker has reported since the last poll, oldest first, each the
        list of its workers' lines."""
        for line in self._read_new():
            w, s = int(line.get("worker", 0)), int(line.get("second", 0))
            self._partial.setdefault(s, []).append(line)
            self._latest[w] = max(self._latest.get(w, -1), s)
        if not self._latest:
            return []
        complete_upto = min(self._latest.values())
        out = []
        for s in sorted(k for k in self._partial if k <= complete_upto and k > self._reported):
            out.append(self._partial.pop(s))
            self._reported = s
        return out


def combine(
    lines: list[dict],
    sampler=None,
    cpus: set[int] | None = None,
    loadgen_has_own_cpus: bool = False,
) -> LiveSecond:
    """One LiveSecond from one second's worker lines and the sampler's newest readings."""
    ok = sum(int(x.get("ok", 0)) for x in lines)
    cpu, noisy = math.nan, None
    if sampler is not None:
        if sampler.samples:
            cpu = sampler.samples[-1][1]
        noisy = last_second_noise(sampler, ok, cpus or set(), loadgen_has_own_cpus)
    phases = [x.get("phase", "") for x in lines]
    return LiveSecond(
        second=int(lines[0].get("second", 0)),
        phase=max(set(phases), key=phases.count) if phases else "",
        ok=ok,
        errors=sum(int(x.get("errors", 0)) for x in lines),
        p50_ms=max((float_or_nan(x.get("p50_ms")) for x in lines), default=math.nan),
        p99_ms=max((float_or_nan(x.get("p99_ms")) for x in lines), default=math.nan),
        lateness_p99_ms=max(
            (float_or_nan(x.get("lateness_p99_ms")) for x in lines), default=math.nan
        ),
        server_cpu_pct=cpu,
        noisy=noisy,
    )


def last_second_noise(
    sampler, requests: int, cpus: set[int], loadgen_has_own_cpus: bool
) -> str | None:
    """Why the last ~second was not quiet ("" when it was; None before two samples), judged
    by the same rules as a whole trial (measure/noise.py)."""
    samples = list(sampler.noise)
    if len(samples) < 2:
        return None
    last = samples[-1]
    first = next((s for s in reversed(samples) if last.t_ns - s.t_ns >= 0.9e9), samples[0])
    if last.t_ns <= first.t_ns:
        return None
    window_s = (last.t_ns - first.t_ns) / 1e9
    try:
        row = noise.readings(first, last, requests, window_s, cpus)
    except (ZeroDivisionError, ValueError):
        return None
    return "; ".join(noise.noise_reasons(row, loadgen_has_own_cpus))
