"""The READMEs' experiment examples run as written: every ```yaml block of README.md and
experiments/README.md passes `perfctl plan`, and the README's nginx server (its port inside
`files: {nginx.conf: ...}`) serves a real trial."""

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import setup_kit

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "experiments" / "README.md"]
_YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)


def yaml_blocks() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for i, m in enumerate(_YAML_BLOCK.finditer(doc.read_text()), 1):
            out.append((f"{doc.relative_to(ROOT)}#{i}", m.group(1)))
    return out


def perfctl(args, env, **kw):
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        **kw,
    )


def test_the_readmes_have_yaml_examples():
    names = [name for name, _ in yaml_blocks()]
    assert any(n.startswith("README.md") for n in names), names


@pytest.mark.parametrize("name,text", yaml_blocks(), ids=[n for n, _ in yaml_blocks()])
def test_every_readme_yaml_block_passes_plan(name, text, tmp_path, perfctl_env):
    f = tmp_path / "example.yaml"
    f.write_text(text)
    p = perfctl(["plan", f], perfctl_env, timeout=60)
    assert p.returncode == 0, f"{name}:\n{p.stdout}{p.stderr}"
    assert "trials, estimated wall time" in p.stdout


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


@pytest.mark.slow
def test_readme_nginx_example_runs_for_real(tmp_path, perfctl_env):
    setup_kit.require_tools("nginx", package="nginx-light")
    [(_, text)] = [b for b in yaml_blocks() if b[0] == "README.md#1"]
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
