"""What every study test does: run the study's quick profile into a tmp dir, and execute its
notebook top to bottom on that run (any error in any cell fails the test)."""

import os
from pathlib import Path

import pytest
from cli_kit import perfctl
from healthy_kit import alarming_lines

ROOT = Path(__file__).resolve().parents[2]


# what each study's quick run is shortened to: what its assertions need (make test's time goes
# to trials); never a change to the quick profile's matrix, so every cell still runs
QUICK_OVERRIDES = {
    # 2 s measured (quick: 3 s); the 1 s warm-up stays: 10 clients queued behind `single`
    # need ~2 s (10 x 200 ms) to reach their steady response time
    "client_scaling": ("load.duration=2s",),
    # 2 s measured after 1 s of warm-up (quick: 5 s after 2 s): 1 vs 200 clients differ by
    # orders of magnitude in throughput and response time, far beyond a shorter window's noise
    "littles_law": ("load.duration=2s", "load.warmup=1s"),
    # one release a trial: 1 s from the release to the window's end (quick: 2 s); the clients
    # refused a SYN retry after 1 s and 3 s and are counted when they end (up to the 5 s
    # timeout), so every client is still accounted for
    "registry_burst": ("load.burst_interval=1s",),
    # 4 s measured after 1 s of warm-up (quick: 5 s after 1.5 s): the lowest rate still
    # offers 160 arrivals per cell, enough for the rate and the 100 ms round trip
    "search_mm1": ("load.duration=4s", "load.warmup=1s"),
    # 2 s measured after 0.5 s of warm-up (quick: 3 s after 1 s): 32 clients keep every
    # worker busy at once, and each cell still serves hundreds of requests
    "thread_pool": ("load.duration=2s", "load.warmup=500ms"),
}


def experiment_file(study: str) -> Path:
    return ROOT / "experiments" / f"{study}.yaml"


@pytest.fixture(scope="session")
def run_quick_profile(tmp_path_factory):
    """run_quick_profile(study, *overrides) -> the results dir of `perfctl run
    experiments/<study>.yaml --profile quick [--set OVERRIDE ...]`. Asserts the run succeeded
    and printed nothing alarming (healthy_kit). One run per study and overrides for the whole
    session: the study's tests and the healthy-commands test read the same run."""
    runs: dict[tuple, Path] = {}

    def run(study: str, *overrides: str) -> Path:
        if (study, overrides) in runs:
            return runs[(study, overrides)]
        out = tmp_path_factory.mktemp(study) / "run"
        sets = [a for o in overrides for a in ("--set", o)]
        proc = perfctl(
            "run", experiment_file(study), "--profile", "quick", *sets, "--out", out, timeout=420
        )
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert not alarming_lines(output), alarming_lines(output)
        runs[(study, overrides)] = out
        return out

    return run


@pytest.fixture(scope="session")
def study_run(run_quick_profile):
    """study_run(study) -> the study's quick run, shortened by QUICK_OVERRIDES."""
    return lambda study: run_quick_profile(study, *QUICK_OVERRIDES[study])


@pytest.fixture(scope="session")
def require_java() -> None:
    """A study that needs the Java server fails without a JDK 17 (make setup installs one)."""
    import setup_kit

    setup_kit.require_jdk(17)


@pytest.fixture
def execute_notebook(monkeypatch):
    """execute_notebook(study, run_dir) -> the notebook's printed text, after running
    notebooks/<study>.ipynb on run_dir (PERFCTL_RUN) with no cell raising."""
    import nbformat
    from nbclient import NotebookClient

    def execute(study: str, run_dir: Path) -> str:
        monkeypatch.setenv("PERFCTL_RUN", str(run_dir))
        monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        nb = nbformat.read(ROOT / "notebooks" / f"{study}.ipynb", as_version=4)
        NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
        ).execute()
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
        assert not [o for o in outputs if o.get("output_type") == "error"]
        return "\n".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")

    return execute
