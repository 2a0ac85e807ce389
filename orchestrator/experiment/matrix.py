"""The matrix: axes expanded into cells (cross product, minus `exclude`, plus `include`), and
the stable cell id that names a resolved cell across runs."""
from __future__ import annotations

import hashlib
import itertools
import json

from .document import Scalar, fail


def expand(exp, source: str) -> list[dict[str, Scalar]]:
    axes = dict(exp.matrix)
    for name, vals in axes.items():
        if not vals:
            raise fail(source, f"matrix.{name}", "this axis has no values",
                       "give at least one value, or remove the axis")
    if "server" not in axes:
        axes = {"server": list(exp.servers), **axes}
    for v in axes["server"]:
        if v not in exp.servers:
            raise fail(source, "matrix.server", f"{v!r} is not defined under servers",
                       f"use one of {', '.join(exp.servers)}")
    names = list(axes)
    combos = [dict(zip(names, vals)) for vals in itertools.product(*axes.values())]
    for i, rule in enumerate(exp.exclude):
        for k in rule:
            if k not in axes:
                raise fail(source, f"exclude[{i}].{k}", "not a matrix axis",
                           f"use one of {', '.join(names)}")
        combos = [c for c in combos if not all(c[k] == v for k, v in rule.items())]
    for i, extra in enumerate(exp.include):
        missing = [n for n in names if n not in extra]
        unknown = [k for k in extra if k not in axes]
        if unknown:
            raise fail(source, f"include[{i}].{unknown[0]}", "not a matrix axis",
                       f"use only {', '.join(names)}")
        if missing:
            raise fail(source, f"include[{i}]", f"gives no value for axis {', '.join(missing)}",
                       "an included cell names a value for every axis")
        if extra["server"] not in exp.servers:
            raise fail(source, f"include[{i}].server", f"{extra['server']!r} is not a server",
                       f"use one of {', '.join(exp.servers)}")
        if extra not in combos:
            combos.append({n: extra[n] for n in names})
    if not combos:
        raise fail(source, "matrix", "the matrix is empty after exclude",
                   "loosen the exclude rules or add axis values")
    return combos


def cell_id(doc: dict) -> str:
    """A stable id of a resolved cell document (same config -> same id across runs)."""
    blob = json.dumps(doc, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
