"""Which directory a `perfctl run` (or `perfctl.run(out=..., resume=...)`) writes into,
decided before anything is written.

    perfctl run FILE                   results/<name>/<YYYYmmdd-HHMMSS> (-2, -3 in one second)
    perfctl run FILE --out DIR         DIR, when it is new or empty
    perfctl run --resume DIR [FILE]    DIR, when it is a run of the same experiment whose
                                       resolved config (compiled now from FILE, or from the
                                       run's own run.json) has the same cells and repeats

Anything else (--out on an existing run or on a non-empty folder, --resume on a run another
perfctl is writing or whose config differs) is a PerfctlError and nothing is written. Every
path the user gives is made absolute here, against the current directory, before any use:
the load generator and the servers run with other working directories.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import results
from ..errors import PerfctlError
from ..experiment import Plan, compile_document, load_plan
from ..proc import process
from ..results.claim import claim_out_dir
from ..run.execute import run_info

RESULTS_ROOT = Path("results")


@dataclass
class Choice:
    """What `perfctl run` runs and where: `resumed` (the dir holds a run already) and
    `default` (the dir is results/<name>/<stamp>, so results/latest follows it)."""

    plan: Plan
    run_dir: Path | None  # None until claim(): a new dir is created only then
    resumed: bool
    default: bool
    out: Path | None = None

    def claim(self) -> Path:
        """Create the new run dir (after every check passed); the resumed dir as it is."""
        if self.run_dir is None:
            self.run_dir = (
                claim_out_dir(self.out)
                if self.out is not None
                else results.new_run_dir(self.plan.experiment.name, RESULTS_ROOT.resolve())
            )
        return self.run_dir


def choose(
    file: Path | None,
    profile: str | None,
    overrides: list[str] | None,
    out: Path | None,
    resume: Path | None,
) -> Choice:
    """The plan and the target of one `perfctl run` (module docstring)."""
    if resume is not None:
        if out is not None and out.resolve() != resume.resolve():
            raise PerfctlError(
                f"--out {out} and --resume {resume} name two directories; "
                "--resume writes into the run it finishes. Fix: drop --out."
            )
        return _resume(resume.resolve(), file, profile, overrides)
    if file is None:
        raise PerfctlError(
            "perfctl run needs an experiment file (or --resume RUN_DIR). "
            "Fix: perfctl run experiments.yaml"
        )
    plan = load_plan(file.resolve(), profile, overrides)
    return Choice(
        plan,
        None,
        resumed=False,
        default=out is None,
        out=out.resolve() if out is not None else None,
    )


def _resume(
    run_dir: Path, file: Path | None, profile: str | None, overrides: list[str] | None
) -> Choice:
    info = results.load(run_dir).info
    owner = process.run_owner(run_dir)
    if owner is not None:
        raise PerfctlError(
            f"--resume {run_dir}: perfctl (pid {owner}) is running this run "
            f"right now. Fix: wait for it to finish, or stop it (kill {owner}) "
            "and resume then."
        )
    if file is not None:
        plan = load_plan(file.resolve(), profile, overrides)
        now = f"in {file.resolve()}"
    else:
        plan = compile_document(info["document"], info["source"], profile, overrides)
        how = " ".join(
            ([f"--profile {profile}"] if profile else []) + [f"--set {o}" for o in overrides or []]
        )
        now = f"with {how}" if how else "as compiled now from its run.json"
    problem = config_difference(info, _as_json(run_info(plan, {})))
    if problem:
        raise PerfctlError(
            f"--resume {run_dir}: the run and the experiment {now} differ: {problem}. "
            "Resuming would mix trials of two configurations in one trials.csv. Fix: resume "
            "with the experiment as it was (perfctl run --resume DIR, nothing else), or start a "
            "new run (perfctl run FILE)."
        )
    return Choice(plan, run_dir, resumed=True, default=False)


def _as_json(info: dict) -> dict:
    return json.loads(json.dumps(info, default=str))


def _label(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def first_difference(a, b, path: str = "") -> tuple[str, object, object] | None:
    """(key path, value in a, value in b) of the first place two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            found = first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
            if found:
                return found
        return None
    return None if a == b else (path, a, b)


def config_difference(stored: dict, now: dict) -> str | None:
    """What differs between a run's run.json and run_info() of a plan compiled now, in the
    words of the experiment file, or None when they would run the same trials."""
    for key in ("experiment", "axes", "repeats"):
        if stored.get(key) != now.get(key):
            return f"`{key}` is {stored.get(key)!r} in the run but {now.get(key)!r} now"
    old, new = stored.get("cells", []), now["cells"]
    if [c["cell_id"] for c in old] == [c["cell_id"] for c in new]:
        return None
    old_ids = {c["cell_id"] for c in old}
    by_values = {json.dumps(c["values"], sort_keys=True): c for c in old}
    for cell in new:
        if cell["cell_id"] in old_ids:
            continue
        twin = by_values.get(json.dumps(cell["values"], sort_keys=True))
        if twin is None:
            return f"cell {_label(cell['values'])} is not in the run"
        found = first_difference(
            {k: v for k, v in twin.items() if k != "cell_id"},
            {k: v for k, v in cell.items() if k != "cell_id"},
        )
        if found:
            key, was, is_ = found
            return f"cell {_label(cell['values'])}: `{key}` is {was!r} in the run but {is_!r} now"
    new_ids = {c["cell_id"] for c in new}
    gone = [c for c in old if c["cell_id"] not in new_ids]
    if gone:
        return f"cell {_label(gone[0]['values'])} of the run is not in the experiment now"
    return "the cells come in another order"
