"""Every notebook in notebooks/ runs top to bottom against a run it was written for: the
general ones (analysis.ipynb) against a small run here; a study's notebook (named after
experiments/<study>.yaml) against that study's quick run in tests/studies/."""

import os
from pathlib import Path

import nbclient
import nbformat
import pytest

from .conftest import ROOT

ALL = sorted((ROOT / "notebooks").glob("*.ipynb"))
STUDIES = [p for p in ALL if (ROOT / "experiments" / f"{p.stem}.yaml").is_file()]
NOTEBOOKS = [p for p in ALL if p not in STUDIES]


def test_both_kinds_of_notebook_are_found():
    """An empty parameter list would turn the two tests below into a skip."""
    assert STUDIES and (ROOT / "notebooks" / "analysis.ipynb") in NOTEBOOKS, ALL


@pytest.mark.parametrize("path", STUDIES, ids=[p.name for p in STUDIES])
def test_every_study_notebook_is_executed_by_its_study_test(path: Path):
    test = ROOT / "tests" / "studies" / f"test_study_{path.stem}.py"
    assert test.is_file() and "execute_notebook(" in test.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, small_run, monkeypatch):
    monkeypatch.setenv("PERFCTL_RUN", str(small_run))
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()  # raises CellExecutionError on any error
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
