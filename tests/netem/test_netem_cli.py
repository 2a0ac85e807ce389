"""`perfctl netem proxy` and `perfctl doctor` (mounted by the lead; tested standalone here)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli.doctor import doctor
from orchestrator.cli.netem import app, build_proxy_command
from orchestrator.errors import PerfctlError
from orchestrator.measure.hostinfo import host_settings

runner = CliRunner()


def test_netem_cli_proxy_dry_run():
    r = runner.invoke(
        app,
        [
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--to",
            "127.0.0.1:80",
            "--delay",
            "10ms",
            "--jitter",
            "1ms",
            "--loss",
            "1%",
            "--bandwidth",
            "10mbit",
            "--dry-run",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "--delay-up 10ms --delay-down 10ms --jitter 1ms" in r.output
    assert "--loss 0.01 --rto 200ms --bandwidth 10000000bit" in r.output


def test_netem_cli_proxy_bad_units_exit_2():
    r = runner.invoke(
        app, ["proxy", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:80", "--delay", "10 parsecs"]
    )
    assert r.exit_code == 2
    r = runner.invoke(app, ["proxy", "--listen", "nowhere", "--to", "127.0.0.1:80"])
    assert r.exit_code == 2


def test_netem_cli_build_command_asymmetric():
    argv = build_proxy_command("127.0.0.1:1", "127.0.0.1:2", delay="5ms", delay_down="1ms")
    assert argv[argv.index("--delay-up") + 1] == "5ms"
    assert argv[argv.index("--delay-down") + 1] == "1ms"


@pytest.mark.untimed  # what it records, not how fast
def test_netem_cli_proxy_foreground_sigterm(echo_port):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "netem",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--to",
            f"127.0.0.1:{echo_port}",
            "--delay",
            "1ms",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert re.match(r"perfctl-proxy listening on 127\.0\.0\.1:\d+ to 127\.0\.0\.1:\d+", line), line
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(5) == 0
    assert "stats:" in proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()


def test_netem_host_settings():
    h = host_settings()
    for key in (
        "net.core.somaxconn",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_tw_reuse",
        "RLIMIT_NOFILE",
        "cpu_count",
        "cpu_governor",
    ):
        assert key in h
    assert h["cpu_count"] >= 1
    assert h["RLIMIT_NOFILE"]["soft"] <= h["RLIMIT_NOFILE"]["hard"]
    import json

    json.dumps(h)


@pytest.mark.untimed  # what it records, not how fast
@pytest.mark.usefixtures("live")
def test_netem_doctor_table():
    app2 = typer.Typer()
    app2.command()(doctor)
    r = runner.invoke(app2, [])
    assert r.exit_code == 0, r.output
    for word in ("proxy", "netem", "tbf", "somaxconn", "RLIMIT_NOFILE"):
        assert word in r.output
    r = runner.invoke(app2, ["--json"])
    assert r.exit_code == 0 and '"backends"' in r.output


def test_netem_cli_realism_options_reach_the_proxy_argv():
    argv = build_proxy_command(
        "127.0.0.1:1",
        "127.0.0.1:2",
        profile="lte",
        loss_burst="1%,25%",
        reorder="5%",
        reset="0.1%",
        blackhole="0.2%",
        cpus="0,1",
        jitter="1ms",
        jitter_correlation="50%",
    )
    assert argv[argv.index("--delay-up") + 1] == "35ms"
    assert argv[argv.index("--bandwidth") + 1] == "12000000bit"
    assert argv[argv.index("--gemodel") + 1] == "0.01,0.25,1,0"
    for flag, value in (
        ("--reorder", "0.05"),
        ("--reset", "0.001"),
        ("--blackhole", "0.002"),
        ("--cpus", "0,1"),
        ("--jitter-correlation", "0.5"),
    ):
        assert argv[argv.index(flag) + 1] == value, flag
    with pytest.raises(PerfctlError, match="--loss-burst"):
        build_proxy_command("127.0.0.1:1", "127.0.0.1:2", loss_burst="1%")
    with pytest.raises(PerfctlError, match="unknown profile"):
        build_proxy_command("127.0.0.1:1", "127.0.0.1:2", profile="moon")
