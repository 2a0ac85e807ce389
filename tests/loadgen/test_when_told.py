"""`python -m loadgen --when-told SPEC OUT`: the orchestrator starts the generator with the
trial and tells it `go` once the spec is written (orchestrator/run/trial.py). Until then it
sends nothing and reads no spec; told anything else, or never told, it exits 0 having sent
nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

ROOT = Path(__file__).resolve().parents[2]


def _start(spec: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen", "--when-told", str(spec), str(out)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_it_reads_the_spec_written_after_its_start_once_told_go(c_server, tmp_path):
    spec, out = tmp_path / "spec.json", tmp_path / "out"
    out.mkdir()
    proc = _start(spec, out)  # no spec yet: it must not look for one before `go`
    spec.write_text(
        json.dumps(
            {
                "host": "127.0.0.1",
                "port": c_server.port,
                "target": "/health",
                "mode": "closed",
                "connections": 1,
                "duration_s": 0.3,
                "warmup_s": 0.0,
                "timeout_s": 2.0,
                "seed": 1,
            }
        )
    )
    _, err = proc.communicate(b"go\n", timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests_recorded"] > 0, summary


@pytest.mark.parametrize("told", [b"", b"stop\n"])
def test_never_told_go_it_exits_0_having_sent_nothing(told, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = _start(tmp_path / "missing-spec.json", out)
    _, err = proc.communicate(told, timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert list(out.iterdir()) == []
