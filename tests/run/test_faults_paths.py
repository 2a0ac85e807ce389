"""Paths the user gives: `files:` stay inside {workdir}, `name:` stays one directory under
results/, and relative paths (--out, --resume, the experiment file) work from any directory."""

from __future__ import annotations

import pandas as pd
import pytest
from fault_kit import tiny

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

ONE_TRIAL = (
    tiny("0.5s")
    .replace("matrix: {server: [sh, py]}", "matrix: {server: [py]}")
    .replace("workload: {path: /, params: {}}", "workload: {path: /health, params: {}}")
)
WITH_FILES = """
name: files
servers:
  s: {cmd: "python3 -m http.server {port} --bind 127.0.0.1", files: {"NAME": "pwned"}}
load: {mode: closed, connections: 1, duration: 0.3s, warmup: 0s}
"""


@pytest.mark.parametrize("name", ["ABSOLUTE", "../../escape.txt"])
def test_files_outside_workdir_are_refused_naming_the_key(
    name, tmp_path, write_yaml, perfctl, assert_clean_error
):
    name = str(tmp_path / "escape.txt") if name == "ABSOLUTE" else name
    exp = write_yaml(WITH_FILES.replace("NAME", name))
    proc = perfctl("run", str(exp), "--out", str(tmp_path / "run"))
    assert_clean_error(proc, "`servers.s.files`", repr(name), "relative path inside {workdir}")
    assert not list(tmp_path.rglob("escape.txt"))
    assert not (tmp_path / "run").exists()


def test_name_of_dots_only_is_refused(tmp_path, write_yaml, perfctl, assert_clean_error):
    work = tmp_path / "work"
    work.mkdir()
    exp = write_yaml(ONE_TRIAL.replace("name: faults", 'name: ".."'))
    proc = perfctl("run", str(exp), cwd=work)
    assert_clean_error(proc, "`name`", "not only dots")
    assert list(work.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == [
        "exp.yaml",
        "work",
    ]


def test_relative_out_resume_and_experiment_paths_work(tmp_path, perfctl):
    (tmp_path / "exps").mkdir()
    (tmp_path / "exps" / "exp.yaml").write_text(ONE_TRIAL)
    work = tmp_path / "work"
    work.mkdir()
    proc = perfctl("run", "../exps/exp.yaml", "--out", "A1", "--no-plots", cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = pd.read_csv(work / "A1" / "trials.csv")
    # the run found its server and measured: every request answered (its validity is the
    # host's verdict, not the paths': CI once read a steal of 30% and an invalid trial here)
    ran = (trials["requests"] > 0) & (trials["errors"] == 0)
    assert ran.all(), trials.to_dict("records")
    again = perfctl("run", "--resume", "A1", "--no-plots", cwd=work)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(0 run, 1 already recorded)" in again.stdout
