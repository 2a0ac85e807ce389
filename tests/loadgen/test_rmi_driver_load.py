"""The bundled RMI driver under load (issue 32, finding 4): its memory stays flat however many
calls a phase makes, and a closed trial at the RMI server's maximum rate, server and driver
pinned to a core each, is valid (its GC pauses and its ticker's lag under the bounds of
loadgen/stats.py `verdict`)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import quiet_kit
from cli_kit import perfctl

from loadgen import contract, validity
from loadgen.spec import LoadSpec
from orchestrator.proc import ports
from orchestrator.run import bundled
from orchestrator.run import driver as run_driver

# every test here runs the RMI driver against a real server
pytestmark = pytest.mark.usefixtures("live")

ROOT = Path(__file__).resolve().parents[2]


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


def _log_pauses_ms(out: Path) -> list[float]:
    """The stop-the-world pauses in the driver's GC log, in order (ms, to the microsecond)."""
    text = (out / run_driver.RMI_DRIVER_GC_LOG).read_text()
    return [float(m) for m in re.findall(r"\] GC\(\d+\) Pause .* ([0-9.]+)ms$", text, re.M)]


@pytest.mark.untimed  # what it records, not how fast
def test_the_driver_reports_its_gc_pauses_from_the_jvms_log_to_the_microsecond(rmi_port, tmp_path):
    """The MXBean's whole milliseconds read a 0.3 ms pause as 0 or 1 ms; summary.json's pauses
    are those of -Xlog:gc: a run of consecutive pauses of the log (the window's), their count,
    sum and longest exactly."""
    s = _phase(rmi_port, tmp_path / "p", 200_000)
    assert s["gc_pause_source"] == "log" and s["gc_pauses"] >= 1, s
    logged = _log_pauses_ms(tmp_path / "p")
    n = s["gc_pauses"]
    runs = [logged[i : i + n] for i in range(len(logged) - n + 1)]
    assert any(
        abs(sum(r) - s["gc_pause_total_ms"]) < 1e-6 and max(r) == s["gc_pause_max_ms"] for r in runs
    ), (s, logged)
    assert s["gc_pause_total_ms"] != round(s["gc_pause_total_ms"])  # not whole milliseconds


@pytest.mark.untimed  # what it records, not how fast
def test_open_load_over_many_blocks_writes_every_arrival_once_at_its_instant(rmi_port, tmp_path):
    """30k arrivals fill 8 blocks, each sealed by the dispatcher while client threads still end
    its rows: every arrival of the schedule is written once, at its intended instant."""
    spec = LoadSpec(
        port=rmi_port,
        target="/work?spin_us=0",
        mode="open",
        rate_rps=10_000,
        connections=8,
        duration_s=2.5,
        warmup_s=0.5,
        schedule_file=contract.SCHEDULE_FILE,
    )
    arrivals = contract.write_schedule(spec, tmp_path / contract.SCHEDULE_FILE)
    (tmp_path / "spec.json").write_text(spec.to_json())
    argv = run_driver.argv("rmi", tmp_path / "spec.json", tmp_path)
    proc = subprocess.run(
        ["taskset", "-c", "1", *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert contract.check_output(tmp_path, "open") == []  # and converted to requests.parquet
    summary = json.loads((tmp_path / "summary.json").read_text())
    req = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(req) == summary["requests_recorded"] == arrivals == 30_000
    intended = np.sort(req["intended_ns"].to_numpy()) - summary["start_ns"]
    assert np.array_equal(intended, contract.read_schedule(tmp_path / contract.SCHEDULE_FILE))
    assert summary["row_blocks_peak"] >= 2 and summary["row_block_waits"] == 0
    assert summary["scheduled_in_window"] == 25_000
    assert 0 <= summary["send_lateness_mean_ms"] <= summary["send_lateness_max_ms"]
    assert summary["send_lateness_p99_ms"] <= summary["send_lateness_p999_ms"]


def test_arrivals_waiting_for_a_client_at_the_windows_end_are_served_while_it_drains(
    rmi_port, tmp_path
):
    """One client, 2 ms a call (500/s) offered 1000/s: arrivals queue for the client (up to the
    outstanding cap, then dropped). Those still queued when the window ends take the client as
    it frees up, within the timeout, as the HTTP generator's do; none is cut off unfinished."""
    spec = LoadSpec(
        port=rmi_port,
        target="/work?spin_us=2000",
        mode="open",
        rate_rps=1000,
        connections=1,
        duration_s=1.0,
        warmup_s=0.2,
        max_outstanding=60,
        timeout_s=5.0,
        schedule_file=contract.SCHEDULE_FILE,
    )
    contract.write_schedule(spec, tmp_path / contract.SCHEDULE_FILE)
    (tmp_path / "spec.json").write_text(spec.to_json())
    argv = run_driver.argv("rmi", tmp_path / "spec.json", tmp_path)
    proc = subprocess.run(
        ["taskset", "-c", "1", *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert contract.check_output(tmp_path, "open") == []
    summary = json.loads((tmp_path / "summary.json").read_text())
    req = pd.read_parquet(tmp_path / "requests.parquet")
    assert summary["dropped"] > 0  # the queue was full at the end
    assert not (req["error"] == 6).any()  # unfinished (loadgen/records.py)
    last = req[req["intended_ns"] >= summary["measure_end_ns"] - 50_000_000]
    assert len(last) and (last["error"].isin([0, 5])).all()  # answered, or dropped at arrival
    assert (last["error"] == 0).any()


# The server works SPIN_US per call on its one core, so it, not the driver, sets the maximum
# rate (~20k calls/s here; the driver at ~50-70% of its core). With spin_us 0 the driver's own
# cost per call (an RMI client deserializes the reply object: ~1.3x the server's) sets it, its
# CPU at the edge of perfctl's 95% bound (servers/java/README.md, "The RMI load driver").
SPIN_US = 20
# the longest young pause of the driver's collector that is not a regression (see below)
MAX_YOUNG_PAUSE_MS = 1.0
MAX_RATE = """
name: rmi-max-rate
servers:
  rmi: {{impl: java, model: rmi, threads: 8}}
workload: {{path: /work, params: {{spin_us: {spin_us}}}}}
load: {{driver: rmi, mode: closed, connections: 8, duration: 3s, warmup: 10s, timeout: 5s}}
repeats: 1
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""


@pytest.mark.needs_quiet
def test_a_closed_trial_at_the_rmi_servers_maximum_rate_is_valid(tmp_path):
    """Closed load with no think time is the server's maximum rate; the driver measuring it
    must not invalidate its own trial (issue 32: GC pause 17 ms and lag 5.6 ms did).
    Needs quiet: a host busy with other work can make any trial invalid: perfctl says so
    (`quiet`), and then this test cannot judge the driver (taken again). It also needs the server,
    not the driver, to set the maximum rate: the server's spin is wall-clock time, the driver's
    cost per call is CPU work, so on a contended core (a shared VM's) the driver may reach the
    closed-mode CPU bound first (CI once read 100%), and then its trial is rightly invalid but
    the premise is gone. The same holds while the driver's JIT still compiles in the window:
    its compiler threads share the driver's one core with eight busy clients, so they get a
    small share of it and take seconds of wall time to finish (with a 5 s warm-up: 106-455 ms
    of compiling in the 3 s window, where CI once read a lag p99 of 8.0 ms; with 12 s,
    36-691 ms). The warm-up here is long enough for most trials; a trial whose JIT compiled for
    more than 3% of its window (`jit_compile_ms`: validity.jit_in_window, which perfctl names
    in the lag's reason) is taken again, as is one invalid for the driver's CPU alone. So is one
    invalid for its GC pauses alone while none reached MAX_YOUNG_PAUSE_MS: a young pause of the
    driver is 0.23-0.33 ms on a quiet host, and a busy moment of a shared VM's stretches one
    (CI read 0.6 ms: the pauses could have moved its 0.81 ms p99 by 3.9%, past the p99's
    precision, counted before closed load's bound of one request per client and pause). Issue 32's pauses, the regression this test
    guards, were 17-70 ms. (quiet_kit: its attempts, then the test fails with the readings.)
    Any other reason fails it at once."""
    exp = tmp_path / "max.yaml"
    exp.write_text(MAX_RATE.format(spin_us=SPIN_US))

    def take(attempt: int) -> tuple[pd.Series, dict]:
        out = tmp_path / f"run{attempt}"
        proc = perfctl("run", exp, "--out", out, "--no-plots", timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        trial = pd.read_csv(out / "trials.csv", keep_default_na=False).iloc[0]
        summary = json.loads(next(out.glob("cells/*/trial-1/summary.json")).read_text())
        assert summary["gc"] == "serial" and summary["row_block_waits"] == 0
        # the driver times its JIT: the warm-up always compiles the hot code, the window may not
        assert summary["warmup_jit_compile_ms"] > 0 and summary["jit_compile_ms"] >= 0
        return trial, summary

    def spoiled(taken: tuple[pd.Series, dict]) -> str | None:
        trial, summary = taken
        if trial["valid"]:
            return None
        reasons = [r for r in str(trial["invalid_reasons"]).split("; ") if r]
        jit_busy = bool(validity.jit_in_window(summary))
        driver_bound = all(r.startswith("load-generator CPU") for r in reasons)
        short_pauses = summary["gc_pause_max_ms"] < MAX_YOUNG_PAUSE_MS and all(
            r.startswith("load-generator GC pauses") for r in reasons
        )
        if trial["quiet"] and not (jit_busy or driver_bound or short_pauses):
            return None  # on a quiet host, for its own reasons: the assertion below fails it
        return (
            f"{round(float(trial['throughput_rps']))} calls/s, JIT {summary['jit_compile_ms']} "
            f"ms in the window, quiet={trial['quiet']} ({trial['noise_reasons']}): "
            f"{trial['invalid_reasons']}"
        )

    trial, summary = quiet_kit.until_quiet(
        take, spoiled, "the server, not the driver's core or its JIT, to set the maximum rate"
    )
    assert trial["valid"], (trial["invalid_reasons"], summary)
