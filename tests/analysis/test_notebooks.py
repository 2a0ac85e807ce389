"""Every notebook in notebooks/ runs top to bottom: analysis.ipynb runs a quick profile itself
through `import perfctl` and analyses the Run it returns; a study's notebook (named after
experiments/<study>.yaml) runs against that study's quick run in tests/studies/."""

import json
import os
from pathlib import Path

import nbclient
import nbformat
import pytest

from .conftest import ROOT

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

ALL = sorted((ROOT / "notebooks").glob("*.ipynb"))
STUDIES = [p for p in ALL if (ROOT / "experiments" / f"{p.stem}.yaml").is_file()]
ANALYSIS = ROOT / "notebooks" / "analysis.ipynb"


def test_every_notebook_is_a_studys_or_the_analysis_notebook():
    """A notebook of another kind would run in no test: give it one here."""
    assert set(ALL) == {*STUDIES, ANALYSIS}


def test_both_kinds_of_notebook_are_found():
    """An empty parameter list would turn the two tests below into a skip."""
    assert STUDIES and ANALYSIS in ALL, ALL


@pytest.mark.parametrize("path", STUDIES, ids=[p.name for p in STUDIES])
def test_every_study_notebook_is_executed_by_its_study_test(path: Path):
    test = ROOT / "tests" / "studies" / f"test_study_{path.stem}.py"
    assert test.is_file() and "execute_notebook(" in test.read_text()


def execute(path: Path, monkeypatch, **env: str):
    """The notebook at `path` after running top to bottom with `env` set; no cell may raise."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
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
    return nb


@pytest.mark.usefixtures("live")
def test_the_analysis_notebook_runs_a_quick_profile_through_perfctl_and_analyses_it(
    tmp_path, monkeypatch
):
    """No PERFCTL_RUN: the notebook's perfctl.run runs experiments.yaml's quick profile (cut to
    four one-second cells) into PERFCTL_OUT, showing the progress bar in the cell's output,
    and the cells after it analyse the Run it returned."""
    monkeypatch.delenv("PERFCTL_RUN", raising=False)
    out = tmp_path / "notebook-run"
    nb = execute(ANALYSIS, monkeypatch, PERFCTL_OUT=str(out))
    info = json.loads((out / "run.json").read_text())
    assert info["experiment"] == "default" and info["profile"] == "quick"
    trials = (out / "trials.csv").read_text().splitlines()
    assert len(trials) == 1 + 4  # the header and one trial per cell
    texts = [
        o.get("text", "") + o.get("data", {}).get("text/plain", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    ]
    assert any("4/4" in t and "ETA" in t for t in texts), "no progress bar in the outputs"
    assert any(str(out) in t for t in texts)  # the run cell printed the Run's path
    assert (out / "notebooks" / "analysis").is_dir()  # the figures cell drew the Run's figures
    assert any("sigma=" in t for t in texts)  # four closed-load levels: the USL fit ran
