"""The manual's experiment examples run as written: every ```yaml block of README.md,
experiments/README.md, the pages under docs/ and the files those pages include passes `perfctl
plan`, and the experiment-file page's nginx server (its port inside `files: {nginx.conf: ...}`)
serves a real trial.

A block that is deliberately not a whole experiment says so on its first line:
`# fragment: ...` (checked key by key against the models of the sections it shows) or
`# fragment, one line each: ...` (alternatives for one key: each line alone, under its parent
keys, is checked the same way). Nothing else is skipped.
"""

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import setup_kit
import yaml

from orchestrator.errors import PerfctlError
from orchestrator.experiment.document import deep_merge
from orchestrator.experiment.plan import compile_document
from orchestrator.experiment.reference import SECTIONS

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

ROOT = Path(__file__).resolve().parent.parent
_YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)
_INCLUDE = re.compile(r"^<!-- perfctl:include (\S+) -->$", re.M)
FRAGMENT = "# fragment: "
ALTERNATIVES = "# fragment, one line each: "
NGINX_BLOCK = "docs/experiment-file.md#1"
# The smallest whole experiment a fragment's top-level scalar keys are merged into.
BASE = {
    "name": "fragment",
    "servers": {"s": {"impl": "python", "model": "async"}},
    "load": {"mode": "closed", "connections": 1, "duration": "1s"},
}


def documents() -> list[Path]:
    """README.md, experiments/README.md, every page of the manual, and every repository file
    a page includes (it is shown on the site as written)."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    included = [ROOT / m for p in pages for m in _INCLUDE.findall(p.read_text())]
    return [ROOT / "README.md", ROOT / "experiments" / "README.md", *pages, *included]


def yaml_blocks() -> list[tuple[str, str]]:
    out = []
    for doc in dict.fromkeys(documents()):
        for i, m in enumerate(_YAML_BLOCK.finditer(doc.read_text()), 1):
            out.append((f"{doc.relative_to(ROOT)}#{i}", m.group(1)))
    return out


def whole_experiments() -> list[tuple[str, str]]:
    return [(n, t) for n, t in yaml_blocks() if not t.startswith(("# fragment", "#fragment"))]


def fragments() -> list[tuple[str, str]]:
    return [(n, t) for n, t in yaml_blocks() if t.startswith(("# fragment", "#fragment"))]


def perfctl(args, env, **kw):
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        **kw,
    )


def check_fragment(doc: dict, name: str) -> None:
    """Each top-level key of a fragment: a section with a model is validated by it (so a
    value that fits another server than the base's still counts); any other key is merged
    into BASE and the whole compiled. Raises on any problem."""
    models = {s.path: s.model for s in SECTIONS if s.path}
    assert isinstance(doc, dict) and doc, f"{name}: a fragment is a mapping of experiment keys"
    for key, value in doc.items():
        if key in models:
            models[key].model_validate(value)
        else:
            compile_document(deep_merge(BASE, {key: value}), name)


def alternatives(text: str) -> list[str]:
    """Each deepest-indented line of a block with its parent lines: one alternative each."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    depth = max(len(ln) - len(ln.lstrip()) for ln in lines)
    out, parents = [], []
    for ln in lines:
        indent = len(ln) - len(ln.lstrip())
        if indent < depth:
            parents = [p for p in parents if len(p) - len(p.lstrip()) < indent] + [ln]
        else:
            out.append("\n".join([*parents, ln]))
    return out


def test_the_manual_has_yaml_examples_in_the_readme_and_in_docs():
    names = [name for name, _ in yaml_blocks()]
    assert any(n.startswith("README.md") for n in names), names
    assert any(n.startswith("docs/") for n in names), names
    assert NGINX_BLOCK in names, names


def test_the_documents_include_the_pages_and_what_they_include():
    docs = {p.relative_to(ROOT).as_posix() for p in documents()}
    assert {"docs/experiment-file.md", "docs/drivers.md", "loadgen/DRIVER.md"} <= docs


@pytest.mark.parametrize("name,text", whole_experiments(), ids=[n for n, _ in whole_experiments()])
def test_every_yaml_block_of_the_manual_passes_plan(name, text, tmp_path, perfctl_env):
    f = tmp_path / "example.yaml"
    f.write_text(text)
    p = perfctl(["plan", f], perfctl_env, timeout=60)
    assert p.returncode == 0, f"{name}:\n{p.stdout}{p.stderr}"
    assert "trials, estimated wall time" in p.stdout


@pytest.mark.parametrize("name,text", fragments(), ids=[n for n, _ in fragments()])
def test_every_marked_fragment_validates_against_its_sections(name, text):
    first = text.splitlines()[0]
    assert first.startswith((FRAGMENT, ALTERNATIVES)), (
        f"{name}: a fragment's first line is `{FRAGMENT}...` or `{ALTERNATIVES}...`, not {first!r}"
    )
    if first.startswith(ALTERNATIVES):
        options = alternatives(text)
        assert len(options) >= 2, f"{name}: alternatives need two lines or more"
        for option in options:
            check_fragment(yaml.safe_load(option), f"{name}: {option!r}")
    else:
        check_fragment(yaml.safe_load(text), name)


def test_a_wrong_fragment_is_caught():
    with pytest.raises(ValueError):
        check_fragment({"load": {"driver": "smoke-signals"}}, "wrong")
    with pytest.raises(PerfctlError):
        check_fragment({"repeats": "often"}, "wrong")


def test_alternatives_split_into_one_line_each_under_their_parents():
    text = "# fragment, one line each: x\nload:\n  driver: http  # a\n  driver: rmi\n"
    assert alternatives(text) == ["load:\n  driver: http  # a", "load:\n  driver: rmi"]


def test_port_inside_files_counts_and_missing_port_says_where(
    write_yaml, perfctl_env, assert_clean_error
):
    base = """
name: ports
servers:
  web: {cmd: "web -c {workdir}/web.conf", files: {web.conf: "%s"}}
load: {mode: closed, connections: 1, duration: 1s, warmup: 0s}
"""
    assert (
        perfctl(["plan", write_yaml(base % "listen {port};")], perfctl_env, timeout=60).returncode
        == 0
    )
    p = perfctl(["plan", write_yaml(base % "listen 8080;", "bad.yaml")], perfctl_env, timeout=60)
    assert_clean_error(p, "bad.yaml", "servers.web", "{port}", "files")


@pytest.mark.usefixtures("live")
def test_the_experiment_file_pages_nginx_example_runs_for_real(tmp_path, perfctl_env):
    setup_kit.require_tools("nginx", package="nginx-light")
    [(_, text)] = [b for b in yaml_blocks() if b[0] == NGINX_BLOCK]
    f = tmp_path / "readme.yaml"
    f.write_text(text)
    out = tmp_path / "run"
    p = perfctl(
        [
            "run",
            f,
            "--profile",
            "quick",
            "--out",
            out,
            "--no-plots",
            "--set",
            "matrix={server: [nginx], rate: [300], threads: [4], delay: [0ms]}",
            "--set",
            "exclude=[]",
            "--set",
            "load.duration=1500ms",
            "--set",
            "load.warmup=300ms",
        ],
        perfctl_env,
        timeout=180,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) == 1
    row = trials.iloc[0]
    assert row["server"] == "nginx" and row["requests"] > 100 and row["errors"] == 0, row
    conf = next((out / "cells").glob("*/trial-1/**/nginx.conf"), None) or next(
        out.rglob("nginx.conf")
    )
    assert "listen 127.0.0.1:" in conf.read_text() and "{port}" not in conf.read_text()
