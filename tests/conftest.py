"""Shared fixtures: the repo root, the venv's perfctl, tiny experiment files; tests/kits/ on
sys.path for the kits every directory uses (setup_kit: what `make setup` provides, a failure
when missing; signal_kit: waiting for an event under a deadline); and the `needs_quiet`
marker's contract, checked at collection. Only tests/kits/, never tests/ itself: tests/loadgen
and tests/models would shadow the packages of the same names (the editable install finds
them through an import hook that comes after the path)."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# `perfctl run` measures the host for 2 s before its first trial; the suite starts hundreds of
# runs, so theirs is 0.2 s (tests/measure/test_hostcheck.py checks the full measurement)
os.environ.setdefault("PERFCTL_HOST_CHECK_S", "0.2")
# every finished `perfctl run` is added to a history store: the suite's runs go to one of its
# own, not to results/history.sqlite of the checkout (tests/history/ names stores explicitly)
if "PERFCTL_HISTORY_URL" not in os.environ:
    _HISTORY_DIR = tempfile.mkdtemp(prefix="perfctl-test-history-")
    os.environ["PERFCTL_HISTORY_URL"] = str(Path(_HISTORY_DIR) / "h.sqlite")
    atexit.register(shutil.rmtree, _HISTORY_DIR, ignore_errors=True)  # not left in /tmp
sys.path.insert(0, str(Path(__file__).resolve().parent / "kits"))

NEEDS_QUIET_DOC = "Needs quiet:"


def pytest_collection_modifyitems(config, items):
    """A test marked needs_quiet says in its docstring what quiet it needs (a line starting
    "Needs quiet:"), so the reader of a failure knows what the host must give it."""
    bare = [
        item.nodeid
        for item in items
        if item.get_closest_marker("needs_quiet")
        and NEEDS_QUIET_DOC not in (getattr(getattr(item, "function", None), "__doc__", "") or "")
    ]
    if bare:
        raise pytest.UsageError(
            f"tests marked needs_quiet without a {NEEDS_QUIET_DOC!r} line in their docstring: "
            + ", ".join(bare)
        )


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "exp.yaml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return write


@pytest.fixture
def perfctl_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["COLUMNS"] = "160"
    return env


@pytest.fixture
def assert_clean_error():
    """assert_clean_error(completed_process, *needles): exit 2, no traceback, every needle in
    the output (the one-paragraph error of docs/running.md "Commands")."""

    def check(proc, *needles: str) -> None:
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out
        assert "Traceback" not in out, out
        for n in needles:
            assert n in out, out

    return check
