"""The results store: one directory per run, claimed (claim.py), written (write.py) and read
back (read.py), and the one module that owns its columns and keys (schema.py). Notebooks:
`from orchestrator import results; run = results.load("results/latest")` gives run.trials,
run.requests, run.timeline, run.endpoints."""

from .claim import new_run_dir, point_latest, prepare, trial_dir
from .read import Run, load
from .schema import read_capacity, read_summary, read_trials, write_json
from .write import TrialTable

__all__ = [
    "Run",
    "TrialTable",
    "load",
    "new_run_dir",
    "point_latest",
    "prepare",
    "read_capacity",
    "read_summary",
    "read_trials",
    "trial_dir",
    "write_json",
]
