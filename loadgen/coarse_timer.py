"""A test-only switch that makes this host's timer behave like a coarse cloud VM's: every timed
wake of the load generator fires late by a seeded draw from a measured distribution.

perfctl has to be exact on the hosts users have, and the ones here may be better than those.
Issue 41 measured `time.sleep(1 ms)` on a 2-vCPU AMD EPYC VM: late by p50 110-139 us, p99
240-1,362 us, p99.9 3.5 ms. With PERFCTL_EMULATE_COARSE_TIMER set, the generator's timer
(worker.at: the timerfd or the loop's own timer) is aimed that much later than asked, so the
early wake-up, the busy-polling and the validity rules meet a coarse timer on any host, and a
test of them fails here as it would there. Busy-polling (a generator on a CPU of its own)
sleeps only across gaps longer than 20 ms, so it is barely touched: as on the VM.

  PERFCTL_EMULATE_COARSE_TIMER=SEED        the VM's lateness on each timed wake
  PERFCTL_EMULATE_COARSE_TIMER=SEED,sleep  and no early wake-up: the generator sleeps to
                                           each instant, as a plain sleeping sender does

Never set by perfctl itself; a trial run with it says so in its summary
(`emulated_coarse_timer`).
"""

from __future__ import annotations

import os

import numpy as np

ENV = "PERFCTL_EMULATE_COARSE_TIMER"
# added to each timed wake: quantile -> ns (log-linear between the points). On top of a quiet
# host's own wake-up (p50 ~90 us on the Intel VM here) a sleeping sender at 300/s then sends
# late by about what the issue measured on the VM: p50 ~140 us, p99 ~0.75 ms, p99.9 ~3.5 ms
QUANTILES = (0.0, 0.5, 0.9, 0.99, 0.999, 1.0)
LATENESS_NS = (10_000, 50_000, 130_000, 550_000, 2_500_000, 6_000_000)
BATCH = 4096


class CoarseTimer:
    """Seeded lateness draws, BATCH at a time."""

    def __init__(self, seed: int, sleep: bool = False) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.sleep = sleep  # no early wake-up: sleep to each instant
        self._log_values = np.log(np.asarray(LATENESS_NS, dtype=np.float64))
        self._batch = np.empty(0, dtype=np.int64)
        self._i = 0

    def reseed(self, *more: int) -> None:
        """Draw from (seed, *more): each trial and each worker process its own stream."""
        self.rng = np.random.default_rng([self.seed, *more])
        self._i = len(self._batch)

    def draw(self) -> int:
        """The next wake's lateness, ns."""
        if self._i == len(self._batch):
            u = self.rng.random(BATCH)
            self._batch = np.exp(np.interp(u, QUANTILES, self._log_values)).astype(np.int64)
            self._i = 0
        v = int(self._batch[self._i])
        self._i += 1
        return v

    @classmethod
    def from_env(cls, environ=None) -> CoarseTimer | None:
        """The emulation PERFCTL_EMULATE_COARSE_TIMER asks for; None when unset. A value that
        is not `SEED` or `SEED,sleep` raises ValueError naming the variable."""
        raw = (os.environ if environ is None else environ).get(ENV, "").strip()
        if not raw:
            return None
        seed, _, how = raw.partition(",")
        if how not in ("", "sleep") or not seed.strip().isdigit():
            raise ValueError(
                f"{ENV}={raw!r}: expected SEED or SEED,sleep (a whole number, then "
                "optionally ',sleep'). Fix: set it so, or unset it (it is for tests)."
            )
        return cls(int(seed), sleep=how == "sleep")
