"""Shared fixtures: the repo root, the venv's perfctl, tiny experiment files."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
