"""perfctl's Python API, `import perfctl` (pyproject.toml maps the name here), for notebooks
and scripts:

    import perfctl
    run = perfctl.run("experiments.yaml", profile="quick", set={"load.duration": "2s"})
    run.trials                                  # the Run that results.load() returns
    figures = perfctl.load("http://127.0.0.1:8080/", connections=4, duration="5s")
    result = perfctl.compare("results/base", run)   # .verdict, .table()
    df = perfctl.history("hello")               # every trial of every run in the history

These are the functions the commands `perfctl run`, `perfctl load` and `perfctl compare`
call: the command line only parses flags and prints. Every problem the user can fix raises
PerfctlError with the paragraph the command line prints.

`import perfctl` stays light (no pandas, numpy or pyarrow): each function's module is loaded
on first use. display.py, summary.py, target.py and numbers.py are the parts the command line
shares with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import __version__
from ..errors import PerfctlError

if TYPE_CHECKING:
    from ..results import Run
    from .compare_runs import compare
    from .history_frame import history
    from .load_url import load
    from .run_experiment import run

__all__ = ["PerfctlError", "Run", "__version__", "compare", "history", "load", "run"]


def __getattr__(name: str):
    """run, load, compare, history and Run on first use: each loads pandas and pyarrow at least."""
    if name == "run":
        from .run_experiment import run  # pandas, pyarrow, the trial path: on first use

        return run
    if name == "load":
        from .load_url import load  # numpy, pyarrow, uvloop: on first use

        return load
    if name == "compare":
        from .compare_runs import compare  # pandas, scipy: on first use

        return compare
    if name == "history":
        from .history_frame import history  # pandas, the store: on first use

        return history
    if name == "Run":
        from ..results import Run  # pandas, pyarrow: on first use

        return Run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
