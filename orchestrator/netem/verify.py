"""Is a run's injected network what was asked for? Checks a probe against the spec.

Each check returns (ok, reason); the trial is invalid when any is off:
  verify            added RTT p50 vs expected (max(10 %, 0.5 ms))
  verify_jitter     shape of the added-RTT distribution vs the spec's (two-sample KS test,
                    off at p < 0.001); only for jitter >= 0.5 ms, since below that the host's own
                    scheduling noise (tens to hundreds of us) is the larger part of the spread
  verify_loss       share of round trips held back an rto vs the spec's (two-sided binomial
                    test, off at p < 0.001)
  verify_bandwidth  bulk throughput vs the configured rate (10 %)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

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


def verify_jitter(added_ms: list[float], model_ms: np.ndarray) -> tuple[bool, str]:
    """KS test of the probe's added RTTs (RTT - baseline) against the spec's simulated ones."""
    import numpy as np  # a trial's checks only: `perfctl doctor` never loads numpy
    from scipy import stats  # here: slow to import, only the shape/loss checks need it

    res = stats.ks_2samp(np.asarray(added_ms), model_ms)
    q = np.percentile(added_ms, [10, 90])
    m = np.percentile(model_ms, [10, 90])
    detail = (
        f"added-RTT distribution p10..p90 measured {q[0]:.3f}..{q[1]:.3f} ms vs expected "
        f"{m[0]:.3f}..{m[1]:.3f} ms (KS D={res.statistic:.2f}, p={res.pvalue:.2g}, "
        f"n={len(added_ms)}, off below p={ALPHA:g})"
    )
    return _verdict(res.pvalue < ALPHA, detail)


def held_threshold_ms(no_loss_model_ms: np.ndarray, rto_ms: float) -> float:
    """An added RTT above this was held back at least one rto: the no-loss p99.9 + rto/2."""
    import numpy as np  # a trial's checks only: `perfctl doctor` never loads numpy

    return float(np.percentile(no_loss_model_ms, 99.9)) + rto_ms / 2


def verify_loss(
    added_ms: list[float], threshold_ms: float, expected_share: float
) -> tuple[bool, str]:
    """Binomial test of the share of round trips held back (added RTT > threshold)."""
    import numpy as np  # a trial's checks only: `perfctl doctor` never loads numpy
    from scipy import stats  # here: slow to import, only the shape/loss checks need it

    n = len(added_ms)
    k = int(np.count_nonzero(np.asarray(added_ms) > threshold_ms))
    p = stats.binomtest(k, n, min(max(expected_share, 1e-9), 1 - 1e-9)).pvalue if n else 1.0
    detail = (
        f"round trips held back an rto: {k}/{n} = {k / max(n, 1) * 100:.1f}% vs expected "
        f"{expected_share * 100:.2f}% (binomial p={p:.2g}, off below p={ALPHA:g})"
    )
    return _verdict(p < ALPHA, detail)
