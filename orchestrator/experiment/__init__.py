"""Experiment files -> typed, frozen models -> a Plan of cells. Imports no run code.

from orchestrator.experiment import load_plan
plan = load_plan("experiments.yaml", profile="quick")   # PerfctlError on any problem
for cell in plan.cells: cell.cell_id, cell.server, cell.load, cell.network, ...
"""

from .plan import Cell, Experiment, Plan, compile_document, load_plan

__all__ = ["Cell", "Experiment", "Plan", "compile_document", "load_plan"]
