"""Shared fixtures: the repo root, the venv's perfctl, tiny experiment files."""
import os
import sys
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
