"""One cell's search: which probe comes next and what each probe's outcome means (what a
probe's row says against counting it is probe_checks.py's; the cell's entry of capacity.json
is capacity_entry.py's). No I/O: execute.py runs the probes and hands their rows here.

The probes, in order:
1. service: one user, no think time (closed). The unloaded latency: if even it misses the SLO,
   no load level can meet it (PerfctlError). Its Server-Timing gives the service time.
2. saturation: SATURATION_USERS or more users, no think time (closed): the most the server
   completes, X_max.
3. knee probes at the levels estimate.next_level picks (open: arrival rates; closed: users,
   with the file's think time), until the interval's half-width is within `precision` or
   `max_trials` trials ran;
4. with `rate: auto`, the curve's points (_curve_levels; not retried).

Every probe must be valid, quiet and stationary to count. One that is not is retried once at
the same level (a retry counts as a trial); a second failure is named in capacity.json and
left out. Three outcomes are evidence rather than failures, upper bounds on the capacity: a
knee probe whose error rate exceeds the SLO's; one overloaded (its latency rose through the
window and is above the SLO); and one not steady whose every second missed the SLO (its best
second is above it: a retry would learn the same). An overloaded open probe also measured
the server's rate under open arrivals (what it completed): below the saturation probe's, the
model is calibrated to it (_recalibrate). A probe the load generator could not drive (it
fell behind its schedule, or its own CPU ran out) is retried once; if it fails again the
search stops with PerfctlError: past that level the load generator, not the server, would be
measured, and its limit is never reported as the server's capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loadgen.floats import float_or_nan
from models.stations import Station

from ..errors import PerfctlError
from ..experiment.document import fail
from ..experiment.plan import Cell
from ..experiment.search import Search
from . import probe_checks as checks
from .capacity_estimate import MODEL_ERRORS, Curve, Estimate, Point, estimate, next_level
from .readings import Readings
from .station import ServiceProbe, station_for

SATURATION_USERS = 16  # at least; 4 per worker thread when the server declares more
MAX_SATURATION_USERS = 1024


@dataclass(frozen=True)
class ProbeSpec:
    """A probe to run: its role, its load level (users for service and saturation probes and
    closed-load searches, arrivals/s for open-load knee probes) and 1, or 2 for a retry."""

    role: str  # service | saturation | knee | curve
    level: float
    attempt: int = 1


@dataclass
class ProbeRecord:
    trial: int
    spec: ProbeSpec
    row: dict
    readings: Readings
    used: bool
    verdict: str  # what the search made of it, in words


@dataclass
class CellSearch:
    cell: Cell
    search: Search
    source: str
    records: list[ProbeRecord] = field(default_factory=list)
    station: Station | None = None
    curve: Curve | None = None
    model_notes: list[str] = field(default_factory=list)
    saturation_rps: float | None = None
    upper: float = math.inf  # the lowest level seen failing the SLO outright
    upper_why: str = ""
    retry: ProbeSpec | None = None
    stopped: str = ""
    failure: PerfctlError | None = None
    service: ServiceProbe | None = None
    given_up: str = ""  # why the cell's search stopped without an answer (not bad input)
    curve_points: int = 0  # `rate: auto`: trials after the search, spread from its capacity
    curve_queue: list | None = None  # their levels still to run (None: not planned yet)
    settled: set = field(default_factory=set)  # roles done: service, saturation

    # --- what the search varies -----------------------------------------------------------
    @property
    def open(self) -> bool:
        return self.cell.load.mode == "open"

    @property
    def unit(self) -> str:
        return "rate_rps" if self.open else "users"

    @property
    def slo_s(self) -> float:
        return self.search.slo.latency_ms / 1e3

    @property
    def trials(self) -> int:
        return len(self.records)

    def probe_cell(self, spec: ProbeSpec) -> Cell:
        """The cell with its load set for this probe (the cell id stays the search's)."""
        load = self.cell.load
        if spec.role in ("knee", "curve") and self.open:
            update = {"mode": "open", "rate_rps": spec.level}
        elif spec.role in ("knee", "curve"):
            update = {"mode": "closed", "connections": int(spec.level)}
        else:
            update = {"mode": "closed", "connections": int(spec.level), "think_time_s": 0.0}
        return self.cell.model_copy(update={"load": load.model_copy(update=update)})

    def saturation_users(self) -> int:
        threads = getattr(self.cell.server, "threads", None) or 0
        conns = self.cell.load.connections if not self.open else 0
        return int(min(MAX_SATURATION_USERS, max(SATURATION_USERS, 4 * threads, conns)))

    # --- the next probe ---------------------------------------------------------------------
    def points(self) -> list[Point]:
        return [
            Point(r.spec.level, r.readings.stat_ms / 1e3, r.readings.within_var)
            for r in self.records
            if r.spec.role == "knee" and r.used and r.verdict.startswith("estimate")
        ]

    def estimate(self) -> Estimate:
        if self.curve is None:
            return Estimate(confidence=self.search.confidence)
        try:
            return estimate(
                self.points(), self.curve, self.slo_s, self.search.confidence, upper=self.upper
            )
        except MODEL_ERRORS as e:
            out = Estimate(confidence=self.search.confidence)
            out.notes.append(self._model_failed(e))
            return out

    def _model_failed(self, e: Exception) -> str:
        """Give the cell's search up on a model that cannot be evaluated (a bug of the models,
        said in one line instead of a traceback; the probes already run stay recorded)."""
        name = self.station.name if self.station is not None else "the station"
        why = f"the fitted model ({name}) could not be evaluated: {type(e).__name__}: {e}"
        if not self.given_up:
            self.given_up = why
        return why

    def next_spec(self) -> ProbeSpec | None:
        """The next probe, or None when the cell is done: its search over (`stopped` says
        why), then the `rate: auto` curve's points, if any."""
        if self.failure is not None:
            return None
        if self.curve_queue is None:
            spec = self._search_spec()
            if spec is not None:
                return spec
            try:
                self.curve_queue = self._curve_levels()
            except MODEL_ERRORS as e:
                self._model_failed(e)
                self.curve_queue = []
        return ProbeSpec("curve", self.curve_queue.pop(0)) if self.curve_queue else None

    def _curve_levels(self) -> list[float]:
        """`rate: auto`: curve_points levels at equal steps of the calibrated model's log
        latency, from its latency at a quarter of the capacity to twice the SLO, so that
        they crowd where latency climbs: around the knee. None without a capacity."""
        est = self.estimate()
        if not self.curve_points or self.curve is None or not est.capacity > 0:
            return []
        target = self.curve.level_for(self.slo_s)
        k = target / est.capacity
        lo = self.curve.latency_s(0.25 * target)
        hi = 2 * self.slo_s
        if not (0 < lo < hi):
            return []
        levels = []
        for j in range(self.curve_points):
            at = self.curve.level_for(lo * (hi / lo) ** (j / (self.curve_points - 1)))
            if at > 0:
                x = _level_of(at / k, self.open)
                if x not in levels:
                    levels.append(x)
        return levels

    def _search_spec(self) -> ProbeSpec | None:
        if self.stopped:
            return None
        if self.given_up:
            self.stopped = self.given_up
            return None
        if self.trials >= self.search.max_trials:
            self.stopped = f"max_trials ({self.search.max_trials}) reached"
            return None
        if self.retry is not None:
            spec, self.retry = self.retry, None
            return spec
        if "service" not in self.settled:
            return ProbeSpec("service", 1)
        if "saturation" not in self.settled:
            return ProbeSpec("saturation", self.saturation_users())
        try:
            if self.curve is None:
                self._fit()
            est = self.estimate()
            if self.given_up:
                self.stopped = self.given_up
                return None
            if est.n >= 2 and est.half_width <= self.search.precision:
                self.stopped = (
                    f"precision reached (±{100 * est.half_width:.1f}% <= "
                    f"{100 * self.search.precision:g}%)"
                )
                return None
            level = next_level(self.points(), self.curve, self.slo_s, est, self.upper)
        except MODEL_ERRORS as e:
            self.stopped = self._model_failed(e)
            return None
        return ProbeSpec("knee", level)

    def _fit(self) -> None:
        row = next(r.row for r in self.records if r.spec.role == "service")
        self.station, self.model_notes = station_for(
            self.cell, self.search.slo.stat, self.service, self.saturation_rps, row
        )
        think = None if self.open else self.cell.load.think_time_s
        measured = self.saturation_rps is not None and math.isfinite(self.saturation_rps)
        self.curve = Curve(self.station, self.search.slo.stat, think, measured_max=measured)

    # --- what a probe meant ---------------------------------------------------------------
    def record(self, trial: int, spec: ProbeSpec, row: dict, readings: Readings) -> None:
        """Judge one finished probe, add the search's columns to its row (results/schema.py)
        and remember it. Sets `failure` (to be raised once the row is written) when the search
        cannot go on: an SLO no level meets, or the load generator's limit."""
        used, verdict = getattr(self, f"_{spec.role}")(spec, row, readings)
        trend = readings.trend
        row.update(
            {
                "search_role": spec.role,
                "search_level": spec.level,
                "search_latency_ms": readings.stat_ms,
                "search_meets_slo": self._meets(row, readings),
                "search_used": used,
                "search_verdict": verdict,
                **trend.columns(),
            }
        )
        self.records.append(ProbeRecord(trial, spec, row, readings, used, verdict))

    def _meets(self, row: dict, readings: Readings) -> bool:
        err = float(row.get("error_rate", math.nan))
        return bool(
            readings.stat_ms <= self.search.slo.latency_ms
            and (err != err or err <= self.search.slo.error_rate)
        )

    def _again(self, spec: ProbeSpec, problems: list[str]) -> tuple[bool, str]:
        """Retry a failed probe once; name it after the second failure."""
        if spec.attempt == 1:
            self.retry = ProbeSpec(spec.role, spec.level, 2)
            return False, "retried: " + "; ".join(problems)
        return False, "not used (failed twice): " + "; ".join(problems)

    def _service(self, spec, row, readings) -> tuple[bool, str]:
        problems = checks.problems(self.search, row, readings)
        slo = self.search.slo
        err = float(row.get("error_rate", 0.0) or 0.0)
        misses = not (readings.stat_ms <= slo.latency_ms) or err > slo.error_rate
        if misses and checks.noise(row) and checks.noise(row) not in problems:
            problems.append(checks.noise(row))  # a disturbed probe never rules an SLO out
        if problems and spec.attempt == 1:
            return self._again(spec, problems)
        if problems and (misses or not checks.valid_for_slo(self.search, row)):
            # twice unusable: nothing to build on, and no verdict on the SLO either
            self.given_up = "the single-user probe failed twice: " + "; ".join(problems)
            return False, "not used (failed twice): " + "; ".join(problems)
        self.settled.add("service")
        self.service = readings.service
        if misses:
            over = readings.stat_ms > slo.latency_ms
            what = (
                f"{slo.stat} was {readings.stat_ms:.3g} ms"
                if over
                else (f"error rate was {100 * err:.3g}%")
            )
            self.failure = fail(
                self.source,
                f"search.slo.{slo.stat if over else 'error_rate'}",
                f"no load can meet the SLO ({slo.text}) in cell {self.cell.label}: with one "
                f"request at a time, the lowest load there is, its {what} (probe "
                f"{self.trials + 1}, a valid, quiet, steady trial)",
                "set the SLO above what one request alone takes, or make the work per request "
                "smaller",
            )
            return True, "model: the SLO is out of reach"
        note = "; used for the model despite: " + "; ".join(problems) if problems else ""
        return True, "model" + note

    def _saturation(self, spec, row, readings) -> tuple[bool, str]:
        problems = checks.problems(self.search, row, readings)
        if checks.loadgen_limited(self.search, row):
            self.settled.add("saturation")
            self.model_notes.append(
                f"saturation probe: the load generator was the limit "
                f"({float(row.get('throughput_rps', math.nan)):.4g}/s is a lower bound)"
            )
            return False, "not used: the load generator was the limit: " + "; ".join(problems)
        if problems and spec.attempt == 1:
            return self._again(spec, problems)
        self.settled.add("saturation")
        if not checks.valid_for_slo(self.search, row):
            return False, "not used (failed twice): " + "; ".join(problems)
        self.saturation_rps = float(row.get("throughput_rps", math.nan))
        note = "; used for the model despite: " + "; ".join(problems) if problems else ""
        return True, "model" + note

    def _knee(self, spec, row, readings) -> tuple[bool, str]:
        problems = checks.problems(self.search, row, readings)
        slo = self.search.slo
        err = float(row.get("error_rate", 0.0) or 0.0)
        unit = "/s" if self.open else " users"
        lateness_ms = float_or_nan(row.get("send_lateness_p99_ms"))
        behind = not (readings.stat_ms > slo.latency_ms) or lateness_ms >= 0.25 * slo.latency_ms
        if checks.loadgen_limited(self.search, row) and behind:
            if spec.attempt == 1:
                return self._again(spec, problems)
            self.failure = fail(
                self.source,
                "search",
                f"in cell {self.cell.label} the load generator could not drive "
                f"{spec.level:g}{unit} (twice: {'; '.join(checks.reasons(self.search, row))}), so the "
                "server's capacity under the SLO lies at or above what perfctl can offer on "
                "this host; the search stops rather than report the load generator's limit as "
                "the server's",
                "give the load generator more CPU (load.processes: 2 or more, "
                "placement.loadgen_cpus apart from placement.server_cpus), or make each "
                "request heavier (workload) so the server saturates sooner",
            )
            return False, "not used: the load generator was the limit"
        # the load generator in trouble only because the server is overloaded (its latency,
        # not the sends' lateness, broke the SLO) is judged below like any overloaded probe
        if err > slo.error_rate and bool(row.get("quiet", True)):
            self._fails_at(spec.level, f"error rate {100 * err:.3g}% at {spec.level:g}{unit}")
            return True, "upper bound: errors above the SLO's"
        trend = readings.trend
        valid_quiet = (
            checks.valid_for_slo(self.search, row) or checks.loadgen_limited(self.search, row)
        ) and bool(row.get("quiet", True))
        if (
            valid_quiet
            and trend.stationary is False
            and trend.rising
            and readings.stat_ms > slo.latency_ms
        ):
            self._fails_at(spec.level, f"overloaded at {spec.level:g}{unit}: {trend.reason}")
            if self.open:
                self._recalibrate(spec.level, readings.completed_rps)
            return True, "upper bound: overloaded (latency rising through the window)"
        if valid_quiet and trend.stationary is False and readings.best_second_ms > slo.latency_ms:
            # not steady, but not one second of the window met the SLO (a falling p99 far
            # above it: an overloaded server's queue draining in bursts, or one still warming
            # up that missed the SLO even at its best): the level fails whichever it was,
            # and retrying it would spend a trial to learn the same
            best = readings.best_second_ms
            self._fails_at(
                spec.level,
                f"every second above the SLO at {spec.level:g}{unit} (best {best:.3g} ms)",
            )
            return True, (
                f"upper bound: not one second of the window met the SLO (the best second's "
                f"{slo.stat} was {best:.3g} ms)"
            )
        if problems:
            return self._again(spec, problems)
        noise = checks.noise(row)  # with search.include_noisy: used, and said so
        notes = [f"{noise}; include_noisy"] if noise else []
        if not bool(row.get("valid", False)):
            notes.append(f"send lateness moved other figures, not the {self.search.slo.stat}")
        return True, "estimate" + (f" ({'; '.join(notes)})" if notes else "")

    def _curve(self, spec, row, readings) -> tuple[bool, str]:
        problems = checks.problems(self.search, row, readings)
        if problems:  # a curve point is not retried: it is named, and drawn hollow
            return False, "curve point not used: " + "; ".join(problems)
        return True, "curve point"

    def _recalibrate(self, level: float, completed_rps: float) -> None:
        """An overloaded open probe completes requests as fast as the server can under that
        load: when that is below the saturation the model was calibrated to (the closed
        probe's, whose many users may batch better than open arrivals do), the station is
        calibrated to it instead, so the next probe goes where the new model puts the SLO
        rather than a step below the failed one."""
        current = self.curve.level_max if self.curve is not None else math.inf
        if not (0 < completed_rps < current):
            return
        before = self.saturation_rps
        earlier = [n for n in self.model_notes if n.startswith("overloaded at")]
        self.saturation_rps = completed_rps
        try:
            self._fit()
        except MODEL_ERRORS as e:
            self._model_failed(e)
            return
        self.model_notes += [
            *earlier,
            f"overloaded at {level:g}/s, the server completed {completed_rps:.4g}/s: the model "
            f"is calibrated to that instead of {before:.4g}/s",
        ]

    def _fails_at(self, level: float, why: str) -> None:
        if level < self.upper:
            self.upper, self.upper_why = level, why


def _level_of(x: float, open_: bool) -> float:
    """A level as probed: a rate to 4 digits, users whole (at least 1)."""
    return float(f"{x:.4g}") if open_ else float(max(1, round(x)))
