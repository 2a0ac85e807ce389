"""The bundled RMI driver under load (issue 32, finding 4): its memory stays flat however many
calls a phase makes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.proc import ports
from orchestrator.run import bundled
from orchestrator.run import driver as run_driver

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rmi_port():
    if bundled.find_jdk(17) is None:
        pytest.skip("no JDK >= 17")
    bundled.build("java")
    port = ports.free_port()
    proc = subprocess.Popen(
        ["taskset", "-c", "0", *bundled.command("java", "rmi", port, threads=8)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    line = proc.stdout.readline().decode()
    assert f"listening on 127.0.0.1:{port}" in line, line
    yield port
    proc.kill()
    proc.wait(10)


def _phase(port: int, out: Path, calls: int) -> dict:
    """A closed phase of `calls` calls (8 clients, no think time) by the driver as perfctl runs
    it, on CPU 1; its summary.json."""
    out.mkdir()
    spec = {
        "host": "127.0.0.1",
        "port": port,
        "target": "/work?spin_us=0",
        "mode": "closed",
        "connections": 8,
        "duration_s": 600.0,  # the phase ends when `calls` are made
        "warmup_s": 0.0,
        "timeout_s": 5.0,
        "max_requests": calls,
        "seed": 1,
    }
    (out / "spec.json").write_text(json.dumps(spec))
    argv = run_driver.argv("rmi", out / "spec.json", out)
    proc = subprocess.run(
        ["taskset", "-c", "1", *argv], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def test_driver_memory_is_the_same_for_100k_and_400k_calls(rmi_port, tmp_path):
    """Rows stream to disk in recycled blocks: the blocks made and the heap live after the
    collections do not grow with the calls. Rows kept until the phase ended took 67 bytes
    each: +20 MB of live heap for the 300k more calls."""
    short = _phase(rmi_port, tmp_path / "short", 100_000)
    long = _phase(rmi_port, tmp_path / "long", 400_000)
    assert (short["requests_recorded"], long["requests_recorded"]) == (100_000, 400_000)
    assert long["row_blocks_made"] == short["row_blocks_made"] <= 2 * 8 + 2
    assert long["row_block_waits"] == 0
    # the heap live after each collection: ~7 MB (the blocks and the JVM's own), both
    assert long["heap_after_gc_max_mb"] <= short["heap_after_gc_max_mb"] + 4, (short, long)
    rows = pd.read_csv(tmp_path / "long" / "requests.csv", usecols=["error"])
    assert len(rows) == 400_000 and (rows["error"] == 0).all()
