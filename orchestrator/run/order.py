"""The order trials run in (`order:` in the experiment, recorded in run.json):

- interleaved (default): round 1 of every cell, then round 2, ... so slow drifts of the host
  (warming up, a neighbour starting) spread over every cell instead of landing on one;
- random: rounds as in interleaved, each round's cells in a seeded random order (the seed is
  derived from the experiment's name and recorded as `order_seed`);
- sequential: every trial of the first cell, then of the next, ...

`wants(cell, k)` says whether trial k of a cell is to run (fixed repeats: k <= repeats;
repeats: auto: until the cell's precision is reached). It is asked just before the trial's
turn, so it sees every trial run before. The order is a pure function of the plan and those
answers, so `--resume` walks the same order and skips what is recorded.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator

from ..experiment.plan import Cell, Plan


def order_seed(plan: Plan) -> int:
    return int.from_bytes(hashlib.sha256(plan.experiment.name.encode()).digest()[:4], "big")


def trial_order(plan: Plan, wants: Callable[[Cell, int], bool]) -> Iterator[tuple[Cell, int]]:
    """(cell, trial number) pairs in the plan's order; trial numbers start at 1."""
    if plan.order == "sequential":
        for cell in plan.cells:
            k = 1
            while k <= plan.repeats and wants(cell, k):
                yield cell, k
                k += 1
        return
    rng = random.Random(order_seed(plan))
    for k in range(1, plan.repeats + 1):
        cells = [c for c in plan.cells if wants(c, k)]
        if not cells:
            return
        if plan.order == "random":
            rng.shuffle(cells)
        yield from ((c, k) for c in cells)
