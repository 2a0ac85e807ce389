"""matrix.count agrees with the expansion it avoids, and cells.py's memoized compilation
gives the ids that hashing each resolved cell document gives (ids are stable across versions)."""

from __future__ import annotations

import itertools
import random

import pytest
import yaml

from orchestrator import experiment
from orchestrator.errors import PerfctlError
from orchestrator.experiment import matrix
from orchestrator.experiment.cells import server_dump

BASE = """
name: m
servers:
  a: {impl: python, model: async}
  b: {cmd: "srv --port {port} --t {t}", files: {"conf/x.txt": "v{y}"}}
load: {mode: closed, connections: "{t}", duration: 1s, warmup: 0s}
network: {delay: "{d}"}
"""


def _experiment(rng: random.Random) -> str:
    axes = {
        "t": [1, 2, 3][: rng.randint(1, 3)],
        "x": ["p", "q"][: rng.randint(1, 2)],
        "y": [True, 1, "1"][: rng.randint(1, 3)],
        "d": ["0ms", "1ms"][: rng.randint(1, 2)],
    }
    names = list(axes)
    excludes = []
    for _ in range(rng.randint(0, 3)):
        keys = rng.sample(names, rng.randint(1, 2))
        excludes.append({k: rng.choice(axes[k]) for k in keys})
    includes = [
        {"server": "a", "t": 9, "x": "p", "y": 1, "d": "5ms"},
        {"server": "b", **{k: v[0] for k, v in axes.items()}},
    ][: rng.randint(0, 2)]
    return BASE + f"matrix: {axes!r}\nexclude: {excludes!r}\ninclude: {includes!r}\n"


@pytest.mark.parametrize("seed", range(12))
def test_count_matches_the_expansion_and_ids_match_the_resolved_documents(seed, write_yaml):
    text = _experiment(random.Random(seed)).replace("True", "true")
    try:
        plan = experiment.load_plan(write_yaml(text))
    except PerfctlError as e:  # an exclude may empty the matrix
        assert "empty" in str(e)
        return
    cells = list(plan.cells)
    assert len(plan.cells) == len(cells) == len(list(matrix.combos(plan.experiment, "x")))
    for c in cells:
        resolved = {
            "values": c.values,
            "server": server_dump(c.server),
            "workload": c.workload.model_dump(),
            "load": c.load.model_dump(),
            "network": {"delay": c.values["d"]},  # as written: unit strings
            "placement": c.placement.model_dump(),
        }
        assert c.cell_id == matrix.cell_id(resolved)


def test_count_walks_only_the_axes_that_exclude_rules_name(write_yaml):
    ten = list(range(10))
    text = (
        BASE.replace('"{t}"', "1").replace('"{d}"', "0ms")
        + f"matrix: {{t: {ten}, x: {ten}, y: {ten}, d: {ten}, e: {ten}}}\n"
        "exclude: [{t: 0}, {t: 1, x: 2}]\n"
    )
    exp = experiment.Experiment.model_validate(yaml.safe_load(text))
    n, exact = matrix.count(exp, "x")
    brute = sum(1 for t, x in itertools.product(ten, ten) if t != 0 and (t, x) != (1, 2))
    assert (n, exact) == (2 * brute * 1000, True)
