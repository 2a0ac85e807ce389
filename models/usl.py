"""Universal Scalability Law (Gunther) and Amdahl's law, fitted by bounded nonlinear least squares.

    X(N) = lambda N / (1 + sigma (N - 1) + kappa N (N - 1))

sigma >= 0 is contention (serialisation), kappa >= 0 coherency (crosstalk), lambda > 0 the
throughput of a single unit of concurrency. Amdahl's law is the special case kappa = 0.

The fit minimises the unweighted sum of squared throughput residuals (like R's ``usl``
package, which uses ``nls``) with ``scipy.optimize.least_squares`` under the bounds above.
Confidence intervals are Wald intervals: cov = s^2 (J^T J)^-1 with s^2 = SSR / (n - p),
half-width t_{0.975, n-p} * sqrt(diag(cov)); lower ends are clipped at 0 for the non-negative
parameters (NaN when n <= p or J^T J is singular).

``peak_concurrency`` is never below 1 (see ``_peak``): with sigma >= 1, or a root of
dX/dN = 0 below 1, throughput only falls from N = 1 on and the peak is (1, lambda).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

__all__ = ["USLResult", "fit", "amdahl_fit", "predict"]


def predict(concurrency, sigma: float, kappa: float, lam: float):
    """USL throughput at the given concurrency (scalar or array)."""
    n = np.asarray(concurrency, dtype=float)
    x = lam * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))
    return float(x) if x.ndim == 0 else x


def _peak(sigma: float, kappa: float, lam: float) -> tuple[float, float]:
    """Concurrency N* >= 1 where throughput peaks, and X(N*).

    kappa > 0: the root of dX/dN = 0 is N* = sqrt((1 - sigma)/kappa). Concurrency is at least 1,
    so N* is clamped to 1 when the root is below 1; that covers sigma >= 1 (the root would be 0
    and X(0) = 0, i.e. "peak throughput 0"), where X only falls from N = 1 on, so the peak is
    X(1) = lambda. kappa = 0 (Amdahl): sigma < 1 gives N* = inf and the asymptote lambda/sigma
    (inf when sigma = 0); sigma >= 1 makes X non-increasing, so again N* = 1 and X = lambda."""
    if kappa <= 0:
        if sigma < 1.0:
            return math.inf, (lam / sigma if sigma > 0 else math.inf)
        return 1.0, float(lam)
    n = max(math.sqrt(max(1.0 - sigma, 0.0) / kappa), 1.0)
    return n, float(predict(n, sigma, kappa, lam))


@dataclass(frozen=True)
class USLResult:
    sigma: float
    kappa: float
    lam: float
    sigma_ci: tuple[float, float]
    kappa_ci: tuple[float, float]
    lam_ci: tuple[float, float]
    peak_concurrency: float
    peak_throughput: float
    r_squared: float
    n_points: int
    dof: int
    residual_std: float
    model: str = "usl"

    def predict(self, concurrency):
        return predict(concurrency, self.sigma, self.kappa, self.lam)

    @property
    def params(self) -> dict:
        return {"sigma": self.sigma, "kappa": self.kappa, "lam": self.lam}


def _validate(concurrency, throughput) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(concurrency, dtype=float).ravel()
    x = np.asarray(throughput, dtype=float).ravel()
    if n.shape != x.shape:
        raise ValueError(
            f"concurrency and throughput must have the same length ({n.size} vs {x.size})"
        )
    keep = np.isfinite(n) & np.isfinite(x)
    n, x = n[keep], x[keep]
    if np.any(n <= 0):
        raise ValueError("concurrency values must be > 0")
    if np.any(x < 0):
        raise ValueError("throughput values must be >= 0")
    return n, x


def _initial(n: np.ndarray, x: np.ndarray, fit_kappa: bool) -> np.ndarray:
    """lambda from the best per-unit throughput at the lowest concurrency; sigma, kappa from the
    linearisation lambda N / X - 1 = sigma (N - 1) + kappa N (N - 1), clipped at 0."""
    low = n == n.min()
    lam0 = float(np.max(x[low] / n[low]))
    if lam0 <= 0:
        lam0 = float(np.max(x / n)) or 1.0
    ok = x > 0
    y = lam0 * n[ok] / x[ok] - 1.0
    cols = [n[ok] - 1.0] + ([n[ok] * (n[ok] - 1.0)] if fit_kappa else [])
    A = np.column_stack(cols)
    if A.shape[0] >= A.shape[1] and np.any(A):
        coef = np.linalg.lstsq(A, y, rcond=None)[0]
    else:
        coef = np.zeros(A.shape[1])
    coef = np.maximum(coef, 0.0)
    return np.concatenate([coef, [lam0]])


def _fit(concurrency, throughput, fit_kappa: bool) -> USLResult:
    n, x = _validate(concurrency, throughput)
    p = 3 if fit_kappa else 2
    if n.size < p:
        raise ValueError(f"need at least {p} finite points to fit, got {n.size}")
    if not np.any(x > 0):
        raise ValueError("all throughputs are zero")

    def unpack(theta):
        return (theta[0], theta[1], theta[2]) if fit_kappa else (theta[0], 0.0, theta[1])

    def resid(theta):
        s, k, lam = unpack(theta)
        return predict(n, s, k, lam) - x

    def jac(theta):
        s, k, lam = unpack(theta)
        den = 1.0 + s * (n - 1.0) + k * n * (n - 1.0)
        d_s = -lam * n * (n - 1.0) / den**2
        d_k = -lam * n * n * (n - 1.0) / den**2
        d_l = n / den
        return np.column_stack([d_s, d_k, d_l] if fit_kappa else [d_s, d_l])

    lower = np.array([0.0] * (p - 1) + [1e-300])
    starts = [_initial(n, x, fit_kappa)]
    # A few more starts guard against the flat valley between sigma and kappa.
    for s0 in (0.0, 0.05, 0.3):
        th = starts[0].copy()
        th[0] = s0
        starts.append(th)
    best = None
    for th0 in starts:
        th0 = np.maximum(th0, lower)
        sol = optimize.least_squares(
            resid,
            th0,
            jac=jac,
            bounds=(lower, np.inf),
            method="trf",
            x_scale="jac",
            ftol=1e-15,
            xtol=1e-15,
            gtol=1e-15,
            max_nfev=20000,
        )
        if best is None or sol.cost < best.cost:
            best = sol
    theta = best.x
    s, k, lam = unpack(theta)

    r = resid(theta)
    ssr = float(r @ r)
    sst = float(np.sum((x - x.mean()) ** 2))
    r2 = 1.0 - ssr / sst if sst > 0 else (1.0 if ssr == 0 else 0.0)
    dof = n.size - p
    cis = [(math.nan, math.nan)] * 3
    resid_std = math.sqrt(ssr / dof) if dof > 0 else math.nan
    if dof > 0:
        J = jac(theta)
        try:
            cov = np.linalg.inv(J.T @ J) * (ssr / dof)
            se = np.sqrt(np.maximum(np.diag(cov), 0.0))
            tq = float(stats.t.ppf(0.975, dof))
            vals = [s, k, lam] if fit_kappa else [s, lam]
            ci = [(float(max(v - tq * e, 0.0)), float(v + tq * e)) for v, e in zip(vals, se)]
            cis = ci if fit_kappa else [ci[0], (0.0, 0.0), ci[1]]
        except np.linalg.LinAlgError:
            pass
    if not fit_kappa and math.isnan(cis[1][0]):
        cis[1] = (0.0, 0.0)
    peak_n, peak_x = _peak(s, k, lam)
    return USLResult(
        sigma=float(s),
        kappa=float(k),
        lam=float(lam),
        sigma_ci=tuple(cis[0]),
        kappa_ci=tuple(cis[1]),
        lam_ci=tuple(cis[2]),
        peak_concurrency=peak_n,
        peak_throughput=float(peak_x),
        r_squared=r2,
        n_points=int(n.size),
        dof=int(dof),
        residual_std=resid_std,
        model="usl" if fit_kappa else "amdahl",
    )


def fit(concurrency, throughput) -> USLResult:
    """Fit sigma, kappa >= 0 and lambda > 0 of the USL to (concurrency, throughput) points."""
    return _fit(concurrency, throughput, fit_kappa=True)


def amdahl_fit(concurrency, throughput) -> USLResult:
    """Fit Amdahl's law X(N) = lambda N / (1 + sigma (N - 1)) (the USL with kappa fixed at 0)."""
    return _fit(concurrency, throughput, fit_kappa=False)
