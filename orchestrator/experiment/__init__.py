"""Experiment files -> typed, frozen models -> a Plan of cells. Imports no run code.

from orchestrator.experiment import load_plan
plan = load_plan("experiments.yaml", profile="quick")   # PerfctlError on any problem
for cell in plan.cells: cell.cell_id, cell.server, cell.load, cell.network, ...

The names below load plan.py on first use: importing one small module of the package (the
catalogue of servers, the network model) does not build every model of the file, which
`perfctl --help` would pay for at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .plan import Cell, Experiment, Plan, compile_document, load_plan

__all__ = ["Cell", "Experiment", "Plan", "compile_document", "load_plan"]


def __getattr__(name: str):
    if name in __all__:
        from . import plan  # every model of the experiment file: on first use of these names

        return getattr(plan, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
