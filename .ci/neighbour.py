"""A noisy neighbour for a CI run on a shared host: it busy-spins in bursts that take, on
average, SHARE of one CPU (default 30%), for at most SECONDS, then exits. Bursts last 0.2 to
3 s and the pauses between them are drawn so that the long-run share is SHARE; the scheduler
puts it on whichever CPU it likes, as a neighbour's VM or job would be.

    python3 .ci/neighbour.py [--share 0.3] [--seconds 5400] [--seed 1]

It prints one line a minute: the share it took so far. It sends no traffic.
"""

from __future__ import annotations

import argparse
import random
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--share", type=float, default=0.3)
    ap.add_argument("--seconds", type=float, default=5400.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    start = time.monotonic()
    busy = 0.0
    next_print = start + 60
    while (now := time.monotonic()) - start < a.seconds:
        burst = rng.uniform(0.2, 3.0)
        end = now + burst
        while time.monotonic() < end:
            pass  # the burst: one CPU, fully busy
        busy += burst
        # the pause that keeps the long-run share at SHARE, varied by half either way
        time.sleep(burst * (1 - a.share) / a.share * rng.uniform(0.5, 1.5))
        if time.monotonic() >= next_print:
            elapsed = time.monotonic() - start
            print(
                f"neighbour: {elapsed:.0f} s, busy {100 * busy / elapsed:.0f}% of a CPU", flush=True
            )
            next_print += 60


if __name__ == "__main__":
    main()
