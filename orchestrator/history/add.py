"""Adding runs to the history: after `perfctl run`, and `perfctl history import`.

A run is never lost because the history could not be written: the run directory stays the
truth, `add_finished_run` turns any failure into a warning paragraph (the run itself
succeeded), and `perfctl history import RUN_DIR` adds it later.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import PerfctlError
from ..experiment.history import History
from .record import from_run_dir
from .store import AddResult, Location, Store, locate


def location_of_run(info: dict, store: str | None = None) -> Location:
    """The store a run directory belongs in: --store, PERFCTL_HISTORY_URL, or its experiment
    file's `history:` as recorded in run.json, or the default."""
    raw = (info.get("document") or {}).get("history")
    config = None
    if isinstance(raw, dict):
        try:
            config = History.model_validate(raw)
        except ValueError:
            config = None
    return locate(store, config, info.get("source"))


def add_run(run_dir: str | Path, location: Location) -> AddResult:
    """Add one run directory. PerfctlError (one paragraph) when it or the store fails."""
    record = from_run_dir(run_dir)
    with Store(location) as store:
        return store.add(record)


def add_finished_run(run_dir: Path, location: Location | None) -> tuple[str, bool]:
    """Add a run `perfctl run` just finished: (the line or paragraph to print, True when it
    is a warning). Never raises a PerfctlError: the run is in its directory either way."""
    if location is None:
        return "history: not added (`history: false` in the experiment file)", False
    try:
        result = add_run(run_dir, location)
    except Exception as e:  # any failure, foreseen (PerfctlError) or not: the run is kept
        if not isinstance(e, PerfctlError):
            e = f"{type(e).__name__}: {e}."
        return (
            f"history: this run was not added to the history ({e}) The run itself is complete "
            f"in {run_dir}, which stays the truth; perfctl history import {run_dir} adds it "
            "once the store is back.",
            True,
        )
    what = "added" if result.changed else "already there"
    return (
        f"history: {what} as run {result.run_id} in {location} ({result.trials} trial(s)"
        + (f", {result.capacities} capacities" if result.capacities else "")
        + "); perfctl history show for the trend",
        False,
    )
