"""Server profiles (`profile: true`): the stack folding of each profiler's output, the flame
graph drawn from it, and a real profiled trial of each bundled language."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter

import pandas as pd
import pytest
import setup_kit

from orchestrator.analysis import flamegraph
from orchestrator.measure import profiler
from orchestrator.proc.build import ROOT

PERF_SCRIPT = """perfctl-server 4242 [000] 123.456:   10101010 cpu-clock:
\tffffffff81000000 handle_request+0x1a (/srv/perfctl-server)
\t0000000000401000 worker_loop+0x22 (/srv/perfctl-server)
\t00007f0000000000 start_thread+0x99 (/usr/lib/libc.so.6)

perfctl-server 4242 [000] 123.466:   10101010 cpu-clock:
\tffffffff81000000 handle_request+0x1a (/srv/perfctl-server)
\t0000000000401000 worker_loop+0x22 (/srv/perfctl-server)
\t00007f0000000000 start_thread+0x99 (/usr/lib/libc.so.6)

perfctl-server 4243 [001] 123.470:   10101010 cpu-clock:
\t0000000000400000 [unknown] (/srv/perfctl-server)

"""

JFR_JSON = json.dumps(
    {
        "recording": {
            "events": [
                {
                    "type": "jdk.ExecutionSample",
                    "values": {
                        "stackTrace": {
                            "frames": [
                                {
                                    "method": {
                                        "type": {"name": "perfctl.server.Handler"},
                                        "name": "spin",
                                    }
                                },
                                {
                                    "method": {
                                        "type": {"name": "perfctl.server.Worker"},
                                        "name": "run",
                                    }
                                },
                            ]
                        }
                    },
                },
                {
                    "type": "jdk.ExecutionSample",
                    "values": {
                        "stackTrace": {
                            "frames": [
                                {
                                    "method": {
                                        "type": {"name": "perfctl.server.Worker"},
                                        "name": "run",
                                    }
                                }
                            ]
                        }
                    },
                },
            ]
        }
    }
)


def test_perf_script_folds_root_first_with_the_command_as_root():
    got = profiler.fold_perf_script(PERF_SCRIPT)
    assert got == Counter(
        {
            "perfctl-server;start_thread;worker_loop;handle_request": 2,
            "perfctl-server;[perfctl-server]": 1,
        }
    )


def test_jfr_json_folds_root_first():
    got = profiler.fold_jfr_json(JFR_JSON)
    assert got == Counter(
        {"perfctl.server.Worker.run;perfctl.server.Handler.spin": 1, "perfctl.server.Worker.run": 1}
    )


def test_flame_graph_boxes_are_as_wide_as_their_samples(tmp_path):
    root = flamegraph.read_folded("main;a;b 3\nmain;a 1\nmain;c 4\n")
    assert root.count == 8 and root.children["main"].children["a"].count == 4
    doc = ET.fromstring(flamegraph.svg(root, "t"))
    ns = "{http://www.w3.org/2000/svg}"
    boxes = {
        g.find(f"{ns}title").text.split(" (")[0]: float(g.find(f"{ns}rect").get("width"))
        for g in doc.iter(f"{ns}g")
    }
    assert set(boxes) == {"all", "main", "a", "b", "c"}
    assert boxes["a"] == pytest.approx(boxes["c"]) == pytest.approx(boxes["main"] / 2)
    assert boxes["b"] == pytest.approx(boxes["main"] * 3 / 8)


def test_which_profiler_fits_which_server():
    assert profiler.kind_of(["/usr/bin/python3", "x.py"], None) == "python"
    assert profiler.kind_of(["/usr/lib/jvm/x/bin/java", "-cp"], None) == "java"
    assert profiler.kind_of(["nginx", "-c", "f"], None) == "native"
    assert profiler.kind_of([], "c") == "native"


THREE = """
name: profiled
servers:
  py: {impl: python, model: async}
  c: {impl: c, model: pool, threads: 2}
  java: {impl: java, model: pool, threads: 2}
workload: {path: /work, params: {spin_us: 300}}
load: {mode: closed, connections: 4, duration: 2s, warmup: 500ms}
placement: {server_cpus: [0], loadgen_cpus: [1]}
profile: true
"""


# untimed: a profile of each language's server, not how fast it ran (more than 20 samples in
# a 2.5 s trial of a busy server, with a test beside it or not)
@pytest.mark.usefixtures("live")
@pytest.mark.untimed
def test_a_profile_svg_exists_for_each_language(tmp_path, perfctl_env):
    setup_kit.require_jdk(17)  # the Java server's profile (JFR): make setup installs the JDK
    exp = tmp_path / "p.yaml"
    exp.write_text(THREE)
    out = tmp_path / "run"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(exp),
            "--out",
            str(out),
            "--no-plots",
        ],
        cwd=ROOT,
        env=perfctl_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    trials = pd.read_csv(out / "trials.csv")
    tools = {}
    for _, t in trials.iterrows():
        tdir = out / "cells" / t["cell_id"] / f"trial-{t['trial']}"
        info = json.loads((tdir / "profile.json").read_text())
        tools[t["server"]] = info["tool"]
        if info["tool"] == "perf" and "not let" in info["note"]:
            continue  # a kernel that refuses perf events: the note says so
        assert info["samples"] > 20, (t["server"], info)
        svg = (tdir / "profile.svg").read_text()
        ET.fromstring(svg)
        assert svg.count("<rect") > 5, t["server"]
        if info["tool"] != "jfr":
            assert info["profiler_cpu_s"] >= 0 and info["profiler_cpu_pct_of_one_cpu"] is not None
    assert tools == {"py": "py-spy", "c": "perf", "java": "jfr"}, tools
    report = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", str(out)],
        cwd=ROOT,
        env=perfctl_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stdout + report.stderr
    page = (out / "report.html").read_text()
    assert "Server profiles" in page and page.count('profile.svg"') >= len(trials)
