"""Is a run's injected network what was asked for? Checks a probe against the spec."""
from __future__ import annotations

RTT_REL_TOL = 0.10      # 10 % of the expected added RTT ...
RTT_ABS_TOL_MS = 0.5    # ... but never tighter than 0.5 ms
BW_REL_TOL = 0.10       # measured throughput within 10 % of the configured bandwidth


def rtt_tolerance_ms(expected_ms: float) -> float:
    return max(RTT_REL_TOL * abs(expected_ms), RTT_ABS_TOL_MS)


def verify(expected_ms: float, measured_ms: float) -> tuple[bool, str]:
    """Added RTT check: off by more than max(10 %, 0.5 ms) -> (False, reason)."""
    err = measured_ms - expected_ms
    tol = rtt_tolerance_ms(expected_ms)
    detail = (f"added RTT measured {measured_ms:.3f} ms vs expected {expected_ms:.3f} ms "
              f"(error {err:+.3f} ms, tolerance ±{tol:.3f} ms = max(10%, 0.5 ms))")
    if abs(err) > tol:
        return False, "invalid: " + detail
    return True, "ok: " + detail


def verify_bandwidth(expected_bps: float, measured_bps: float) -> tuple[bool, str]:
    """Throughput check: more than 10 % away from the configured bandwidth -> (False, reason)."""
    rel = measured_bps / expected_bps - 1.0
    detail = (f"throughput measured {measured_bps / 1e6:.3f} Mbit/s vs configured "
              f"{expected_bps / 1e6:.3f} Mbit/s (error {rel * 100:+.1f}%, tolerance ±{BW_REL_TOL * 100:.0f}%)")
    if abs(rel) > BW_REL_TOL:
        return False, "invalid: " + detail
    return True, "ok: " + detail
