"""Without `cluster:` nothing of Dask is imported: the CLI and one local trial's whole code
path load without it (the cluster package is imported only by `perfctl run` with `cluster:`)."""

import subprocess
import sys
from pathlib import Path

import pytest

# untimed: which modules a process imports: not how fast (tests/conftest.py)
pytestmark = pytest.mark.untimed

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_and_the_local_trial_path_never_import_dask():
    code = (
        "import sys, orchestrator.cli.main, orchestrator.run.execute, orchestrator.run.trial;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
