"""The matrix: axes expanded into cells (cross product, minus `exclude`, plus `include`), and
the stable cell id that names a resolved cell across runs.

Nothing here holds the cells in memory: `count()` counts them without expanding (a 10^6-cell
matrix is refused in microseconds, see MAX_CELLS) and `combos()` yields them one at a time.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterator

from .document import Scalar, fail

MAX_CELLS = 100_000  # ~a day of trials at one second each; docs/experiment-file.md
_EXACT_EXCLUDE_COUNT = 200_000  # combinations of excluded axes counted one by one, at most


def axes(exp, source: str) -> dict[str, list[Scalar]]:
    """The matrix axes in order, with `server` first when the file names no server axis;
    validates every axis, exclude rule and include entry."""
    out = dict(exp.matrix)
    for name, vals in out.items():
        if not vals:
            raise fail(
                source,
                f"matrix.{name}",
                "this axis has no values",
                "give at least one value, or remove the axis",
            )
    if "server" not in out:
        out = {"server": list(exp.servers), **out}
    for v in out["server"]:
        if v not in exp.servers:
            raise fail(
                source,
                "matrix.server",
                f"{v!r} is not defined under servers",
                f"use one of {', '.join(exp.servers)}",
            )
    names = list(out)
    for i, rule in enumerate(exp.exclude):
        for k in rule:
            if k not in out:
                raise fail(
                    source,
                    f"exclude[{i}].{k}",
                    "not a matrix axis",
                    f"use one of {', '.join(names)}",
                )
    for i, extra in enumerate(exp.include):
        missing = [n for n in names if n not in extra]
        unknown = [k for k in extra if k not in out]
        if unknown:
            raise fail(
                source,
                f"include[{i}].{unknown[0]}",
                "not a matrix axis",
                f"use only {', '.join(names)}",
            )
        if missing:
            raise fail(
                source,
                f"include[{i}]",
                f"gives no value for axis {', '.join(missing)}",
                "an included cell names a value for every axis",
            )
        if extra["server"] not in exp.servers:
            raise fail(
                source,
                f"include[{i}].server",
                f"{extra['server']!r} is not a server",
                f"use one of {', '.join(exp.servers)}",
            )
    return out


def _excluded(combo: dict, rules: list[dict]) -> bool:
    return any(all(combo[k] == v for k, v in rule.items()) for rule in rules)


def _extra_cells(exp, ax: dict[str, list[Scalar]]) -> list[dict[str, Scalar]]:
    """`include` entries that the cross product minus `exclude` does not already hold."""
    out: list[dict] = []
    for extra in exp.include:
        in_product = all(extra[n] in vals for n, vals in ax.items())
        if (in_product and not _excluded(extra, exp.exclude)) or extra in out:
            continue
        out.append({n: extra[n] for n in ax})
    return out


def combos(exp, source: str) -> Iterator[dict[str, Scalar]]:
    """Every cell's axis values, in order: the cross product minus `exclude`, then `include`."""
    ax = axes(exp, source)
    names = list(ax)
    for vals in itertools.product(*ax.values()):
        combo = dict(zip(names, vals))
        if not _excluded(combo, exp.exclude):
            yield combo
    yield from _extra_cells(exp, ax)


def count(exp, source: str) -> tuple[int, bool]:
    """(cells, exact) without expanding the matrix. Only the axes that exclude rules name are
    walked, one combination at a time; when even those are too many, the count stops past
    MAX_CELLS and is a lower bound (exact False)."""
    ax = axes(exp, source)
    named = [n for n in ax if any(n in rule for rule in exp.exclude)]
    free = math.prod(len(v) for n, v in ax.items() if n not in named)
    kept = 0
    for i, vals in enumerate(itertools.product(*(ax[n] for n in named))):
        if i >= _EXACT_EXCLUDE_COUNT and kept * free > MAX_CELLS:
            return kept * free, False
        if not _excluded(dict(zip(named, vals)), exp.exclude):
            kept += 1
    total = kept * free + len(_extra_cells(exp, ax))
    if total == 0:
        raise fail(
            source,
            "matrix",
            "the matrix is empty after exclude",
            "loosen the exclude rules or add axis values",
        )
    return total, True


def check_size(exp, source: str) -> int:
    """The number of cells; PerfctlError naming the count and how to shrink it when it is
    over MAX_CELLS."""
    n, exact = count(exp, source)
    if n <= MAX_CELLS:
        return n
    ax = axes(exp, source)
    sizes = " x ".join(f"{name} {len(vals)}" for name, vals in ax.items())
    biggest = max(ax, key=lambda a: len(ax[a]))
    raise fail(
        source,
        "matrix",
        f"{'' if exact else 'at least '}{n:,} cells ({sizes}) is over the limit of "
        f"{MAX_CELLS:,} cells per experiment (at seconds per trial, more than a day of "
        "trials)",
        f"shrink the matrix: fewer values on its largest axes ({biggest} has "
        f"{len(ax[biggest])}), `exclude:` rules, or several smaller experiments",
    )


def cell_id(doc: dict) -> str:
    """A stable id of a resolved cell document (same config -> same id across runs)."""
    return cell_id_of_json(json.dumps(doc, sort_keys=True, default=str))


def cell_id_of_json(blob: str) -> str:
    """cell_id() of a document already serialized as json.dumps(doc, sort_keys=True)."""
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
