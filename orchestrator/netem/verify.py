"""Is a run's injected network what was asked for? Checks a probe against the spec.

Each check returns (ok, reason); the trial is invalid when any is off:
  verify            added RTT p50 vs expected (max(10 %, 0.5 ms))
  verify_jitter     shape of the added-RTT distribution vs the spec's (two-sample KS test,
                    off at p < 0.001); only for jitter >= 0.5 ms, since below that the host's own
                    scheduling noise (tens to hundreds of us) is the larger part of the spread
  verify_loss       share of round trips held back an rto vs the spec's (two-sided binomial
                    test, off at p < 0.001)
  verify_bandwidth  bulk throughput vs the configured rate (10 %)
The two tests of a distribution, verify_jitter and verify_loss, are distribution.py's (numpy,
scipy.stats); the rest, here, load neither (`perfctl doctor` imports this module).
"""

from __future__ import annotations

RTT_REL_TOL = 0.10  # 10 % of the expected added RTT ...
RTT_ABS_TOL_MS = 0.5  # ... but never tighter than 0.5 ms
BW_REL_TOL = 0.10  # measured throughput within 10 % of the configured bandwidth
JITTER_MIN_MS = 0.5  # jitter below this is not checked for shape (host noise dominates)
ALPHA = 1e-3  # a distribution / loss-rate check fails below this p-value


def _verdict(off: bool, detail: str) -> tuple[bool, str]:
    """Every check's answer, (ok, reason): not off, and the detail marked invalid or ok."""
    return not off, ("invalid: " if off else "ok: ") + detail


def rtt_tolerance_ms(expected_ms: float) -> float:
    return max(RTT_REL_TOL * abs(expected_ms), RTT_ABS_TOL_MS)


def verify(expected_ms: float, measured_ms: float) -> tuple[bool, str]:
    """Added RTT check: off by more than max(10 %, 0.5 ms) -> (False, reason)."""
    err = measured_ms - expected_ms
    tol = rtt_tolerance_ms(expected_ms)
    detail = (
        f"added RTT measured {measured_ms:.3f} ms vs expected {expected_ms:.3f} ms "
        f"(error {err:+.3f} ms, tolerance ±{tol:.3f} ms = max(10%, 0.5 ms))"
    )
    return _verdict(abs(err) > tol, detail)


def verify_bandwidth(expected_bps: float, measured_bps: float) -> tuple[bool, str]:
    """Throughput check: more than 10 % away from the configured bandwidth -> (False, reason)."""
    rel = measured_bps / expected_bps - 1.0
    detail = (
        f"throughput measured {measured_bps / 1e6:.3f} Mbit/s vs configured "
        f"{expected_bps / 1e6:.3f} Mbit/s (error {rel * 100:+.1f}%, tolerance ±{BW_REL_TOL * 100:.0f}%)"
    )
    return _verdict(abs(rel) > BW_REL_TOL, detail)
