"""Ramp: step the open-loop arrival rate up until a latency/error SLO breaks.

Each step is an open-mode load phase at one rate (the warm-up comes once, before the first
step). A step meets the SLO when its p99 latency < slo_p99_ms and its error rate <
slo_error_rate; each step also records whether the load generator kept its schedule
(`valid`). The sustainable throughput is the highest rate whose step met the SLO; the ramp
stops after the first step that misses it.
"""

from __future__ import annotations

import dataclasses

from .. import stats
from ..phase import generate as generate_phase
from ..sink import ParquetSink
from .base import Mode
from .open_loop import OpenMode


class RampMode(Mode):
    """Drives no Worker itself: each step is an OpenMode, generated one after the other."""

    name = "ramp"

    @property
    def processes(self) -> int:
        return 1  # the steps follow one another in this process

    def step(self, k: int, rate_rps: float) -> OpenMode:
        """Step k (0-based) of the ramp, at rate_rps."""
        spec = self.spec
        return OpenMode(
            dataclasses.replace(
                spec,
                mode="open",
                rate_rps=rate_rps,
                duration_s=spec.ramp_step_s,
                warmup_s=spec.warmup_s if k == 0 else 0.0,
                seed=spec.seed + k,
                processes=1,
            )
        )

    def generate(self, sink: ParquetSink, seq_base: int = 0, live=None) -> dict:
        """Generate the steps, every request written to sink; the summary.

        The summary's measured window is the best step's (the highest that met the SLO, or
        the first step when none did), so the trial row describes the sustainable operating
        point.
        """
        spec = self.spec
        steps, best = [], None
        for k, rate in enumerate(sorted(spec.ramp_rates)):
            rec, summary = generate_phase(self.step(k, rate), sink, seq_base, live)
            row = stats.summarize(rec.frame(), summary, "open", spec.ramp_step_s, rate)
            sink.close_chunks(rec)
            # The SLO is about the server; whether the load generator kept up is reported
            # beside it (`valid`) rather than folded in, so a noisy client shows as such.
            meets = (
                row["latency_p99_ms"] < spec.slo_p99_ms and row["error_rate"] < spec.slo_error_rate
            )
            steps.append(
                {
                    "rate_rps": rate,
                    "achieved_rate": row["achieved_rate"],
                    "throughput_rps": row["throughput_rps"],
                    "latency_p99_ms": row["latency_p99_ms"],
                    "error_rate": row["error_rate"],
                    "valid": row["valid"],
                    "meets_slo": bool(meets),
                    "summary": summary,
                }
            )
            if not meets:
                break
            best = len(steps) - 1
        chosen = steps[best if best is not None else 0]
        summary = dict(chosen["summary"])
        summary["ramp_steps"] = [{k: v for k, v in s.items() if k != "summary"} for s in steps]
        summary["sustainable_rps"] = steps[best]["rate_rps"] if best is not None else 0.0
        summary["ramp_rate_rps"] = chosen["rate_rps"]
        summary["slo"] = {"p99_ms": spec.slo_p99_ms, "error_rate": spec.slo_error_rate}
        return summary
