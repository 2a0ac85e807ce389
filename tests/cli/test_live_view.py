"""What `perfctl run` shows while a trial runs: in a pseudo-terminal 80 columns wide, the line
under the progress bar with the last second's numbers, and a summary with no number cut; off a
terminal, plain log lines with no cursor movement."""

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# not untimed (tests/conftest.py): beside another test a trial is noisy, and its longer live line
# is cut to the terminal's 80 columns
pytestmark = pytest.mark.usefixtures("live")

ONE_CELL = """
name: live
servers:
  py: {impl: python, model: async}
workload: {path: /work, params: {spin_us: 200}}
load: {mode: closed, connections: 2, duration: 3s, warmup: 1s}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
LIVE = re.compile(
    r"measure \d+s +(quiet|NOISY|noise \?) +[\d.]+k? req/s +p50 [\d.]+k? +"
    r"p99 [\d.]+k?ms +\d+ err +cpu [\d.k-]+% +late [\d.k-]+µs"
)


def _env(columns: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm-256color")
    env["COLUMNS"], env["LINES"] = str(columns), "24"
    return env


def run_in_pty(argv: list[str], columns: int, timeout_s: float) -> str:
    """argv's whole output as a terminal `columns` wide received it."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its terminal is the pty
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        os.chdir(ROOT)
        os.execvpe(argv[0], argv, _env(columns))
    chunks = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def test_live_line_under_the_progress_bar_in_an_80_column_terminal(tmp_path):
    exp = tmp_path / "live.yaml"
    exp.write_text(ONE_CELL)
    out = run_in_pty(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(exp),
            "--out",
            str(tmp_path / "run"),
            "--no-plots",
        ],
        80,
        180,
    )
    assert "\x1b[" in out  # a terminal: rich redraws in place
    plain = ANSI.sub("", out)
    assert LIVE.search(plain), plain[-3000:]
    assert "trials.csv" in plain, plain[-3000:]
    summary = plain[plain.index("Summary") :]
    assert "…" not in summary, summary
    assert all(len(line.rstrip("\r")) <= 80 for line in summary.splitlines()), summary
    assert (tmp_path / "run" / "cells").is_dir()
    live = list((tmp_path / "run" / "cells").glob("*/trial-1/live.jsonl"))
    assert live and live[0].read_text().count("\n") >= 3


def test_off_a_terminal_plain_lines_and_quiet_keeps_only_trial_lines(tmp_path):
    exp = tmp_path / "live.yaml"
    exp.write_text(ONE_CELL)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(exp),
            "--out",
            str(tmp_path / "run"),
            "--no-plots",
        ],
        cwd=ROOT,
        env=_env(80),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "\x1b[" not in p.stdout
    assert "trial 1/1: server=py #1" in p.stdout
    lines = [line for line in p.stdout.splitlines() if LIVE.search(line)]
    assert len(lines) >= 2, p.stdout  # about one per second of load
    assert re.search(r"  done: [\d,]+ req/s, p99 [\d.]+ ms, (valid|INVALID)", p.stdout), p.stdout
    q = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(exp),
            "--out",
            str(tmp_path / "run-q"),
            "--no-plots",
            "--quiet",
        ],
        cwd=ROOT,
        env=_env(80),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert q.returncode == 0, q.stdout + q.stderr
    assert "trial 1/1: server=py #1" in q.stdout and not LIVE.search(q.stdout)


def test_progress_line_at_80_columns_cuts_the_label_never_the_counts_or_times():
    from rich.console import Console

    from orchestrator.api.display import LiveDisplay

    console = Console(width=80, force_terminal=True, record=True, color_system=None)
    d = LiveDisplay(console, 6, 0)
    d.progress.update(
        d.task, description="server=py-async, mode=closed, connections=16, rate=300, network=lte #1"
    )
    console.print(next(iter(d.progress.get_renderables())))
    (bar,) = [line for line in console.export_text().splitlines() if line.strip()]
    assert len(bar) <= 80 and "…" in bar, bar  # the label gave way ...
    assert re.search(r"0/6 0:00:00 ETA -:--:--$", bar), bar  # ... not the numbers
