"""The probe's checks of a distribution, each (ok, reason) like verify.py's: the shape of the
added RTTs against the spec's simulated ones (verify_jitter, a two-sample KS test) and the share
of round trips held back an rto against the spec's (verify_loss, a binomial test, above
held_threshold_ms), both off below p = ALPHA.

numpy loads with this module, which Injector.check (base.py) imports when a probe is judged;
scipy.stats, slow to import, only when a shape or loss check runs.
"""

from __future__ import annotations

import numpy as np

from .verify import ALPHA, _verdict


def _stats():
    """scipy.stats, on first use: slow to import, and only the shape and loss checks need it."""
    from scipy import stats  # here: slow to import, only the shape/loss checks need it

    return stats


def verify_jitter(added_ms: list[float], model_ms: np.ndarray) -> tuple[bool, str]:
    """KS test of the probe's added RTTs (RTT - baseline) against the spec's simulated ones."""
    stats = _stats()
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
    return float(np.percentile(no_loss_model_ms, 99.9)) + rto_ms / 2


def verify_loss(
    added_ms: list[float], threshold_ms: float, expected_share: float
) -> tuple[bool, str]:
    """Binomial test of the share of round trips held back (added RTT > threshold)."""
    stats = _stats()
    n = len(added_ms)
    k = int(np.count_nonzero(np.asarray(added_ms) > threshold_ms))
    p = stats.binomtest(k, n, min(max(expected_share, 1e-9), 1 - 1e-9)).pvalue if n else 1.0
    detail = (
        f"round trips held back an rto: {k}/{n} = {k / max(n, 1) * 100:.1f}% vs expected "
        f"{expected_share * 100:.2f}% (binomial p={p:.2g}, off below p={ALPHA:g})"
    )
    return _verdict(p < ALPHA, detail)


def held_back_share(model_ms: np.ndarray, threshold_ms: float) -> float:
    """The share of a spec's simulated added RTTs above threshold_ms: how many round trips it
    expects held back an rto (verify_loss's expected_share)."""
    return float(np.mean(model_ms > threshold_ms))
