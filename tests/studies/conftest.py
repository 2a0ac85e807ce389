"""What every study test does: run the study's quick profile into a tmp dir, and execute its
notebook top to bottom on that run (any error in any cell fails the test)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def run_quick_profile(tmp_path_factory):
    """run_quick_profile(study, *overrides) -> the results dir of `perfctl run
    experiments/<study>.yaml --profile quick [--set OVERRIDE ...]` (asserts the run succeeded).
    The overrides shorten a trial's load to what the study's assertions need (make test's time
    goes to trials); they never change the quick profile's matrix, so every cell still runs."""

    def run(study: str, *overrides: str) -> Path:
        out = tmp_path_factory.mktemp(study) / "run"
        env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="160")
        sets = [a for o in overrides for a in ("--set", o)]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator.cli",
                "run",
                f"experiments/{study}.yaml",
                "--profile",
                "quick",
                *sets,
                "--out",
                str(out),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=420,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return out

    return run


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
