"""The pictures a person sees: a capture of the terminal mid-trial at 80 columns, and a
screenshot of report.html in headless Chromium.

    .venv/bin/python benchmarks/closing_shots.py [--experiment experiments.yaml]
        [--profile quick] [--out DIR] [--profile-server]

Runs the experiment with `perfctl run` inside a tmux session 80 columns x 24 lines, captures
the pane (`tmux capture-pane`) once the live line shows a second of measured load, and again
when the run ends (with its scrollback: the summary table); then writes the report and has
Chromium screenshot it. Prints where each file went. Needs tmux and chromium (make apt
installs both). Asserts nothing about speed: a quiet host only makes the numbers worth
reading.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIVE = re.compile(r"measure \d+s .*req/s")


def tmux(*args: str, check: bool = True) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=check).stdout


def capture_terminal(
    argv: list[str],
    out: Path,
    session: str,
    columns: int = 80,
    rows: int = 24,
    timeout_s: float = 900,
) -> tuple[Path, Path]:
    """Run argv in tmux; save the pane mid-trial and at the end. Returns both files."""
    env = {"PYTHONPATH": str(ROOT), "TERM": "xterm-256color"}
    shell = " ".join(f"{k}={v}" for k, v in env.items()) + " " + " ".join(map(_quote, argv))
    shell += "; echo PERFCTL-EXIT=$?; sleep 3600"
    tmux("kill-session", "-t", session, check=False)
    tmux(
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        str(columns),
        "-y",
        str(rows),
        "-c",
        str(ROOT),
        shell,
    )
    tmux("set-option", "-t", session, "history-limit", "5000")
    mid = out / f"terminal-{columns}col-mid-trial.txt"
    end = out / f"terminal-{columns}col-end.txt"
    deadline = time.monotonic() + timeout_s
    got_mid = False
    try:
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", session)
            if not got_mid and LIVE.search(screen):
                mid.write_text(screen)
                (out / f"terminal-{columns}col-mid-trial.ansi").write_text(
                    tmux("capture-pane", "-p", "-e", "-t", session)
                )
                got_mid = True
            if "PERFCTL-EXIT=" in screen:
                break
            time.sleep(0.3)
        end.write_text(tmux("capture-pane", "-p", "-S", "-", "-t", session))
    finally:
        tmux("kill-session", "-t", session, check=False)
    if not got_mid:
        raise SystemExit(f"no live line seen in the pane; its end is in {end}")
    return mid, end


def _quote(a: str) -> str:
    return "'" + a.replace("'", "'\\''") + "'"


def screenshot(html: Path, png: Path, width: int = 1280, height: int = 3000) -> Path:
    exe = (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )
    if exe is None:
        raise SystemExit("chromium is not installed (make apt installs it)")
    argv = [
        exe,
        "--headless",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--screenshot={png}",
        f"--window-size={width},{height}",
        html.resolve().as_uri(),
    ]
    if os.geteuid() == 0:
        argv.insert(1, "--no-sandbox")
    subprocess.run(argv, capture_output=True, timeout=120, check=True)
    return png


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", default="experiments.yaml")
    ap.add_argument("--profile", default="quick", help="named profile ('' for none)")
    ap.add_argument(
        "--out",
        default=None,
        help="run directory (default: a new one under results/closing-shots/)",
    )
    ap.add_argument(
        "--profile-server",
        action="store_true",
        help="also record server profiles (flame graphs in the report)",
    )
    args = ap.parse_args()
    for tool in ("tmux",):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (make apt installs it)")
    out = (
        Path(args.out)
        if args.out
        else ROOT / "results" / "closing-shots" / time.strftime("%Y%m%d-%H%M%S")
    )
    out = out.resolve()
    shots = out.parent / (out.name + "-shots")
    shots.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "orchestrator.cli", "run", args.experiment, "--out", str(out)]
    if args.profile:
        argv += ["--profile", args.profile]
    if args.profile_server:
        argv.append("--profile-server")
    mid, end = capture_terminal(argv, shots, session=f"perfctl-shots-{os.getpid()}")
    if "PERFCTL-EXIT=0" not in end.read_text():
        raise SystemExit(f"perfctl run failed; see {end}")
    subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", str(out)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        check=True,
        capture_output=True,
    )
    png = screenshot(out / "report.html", shots / "report.png")
    print(f"terminal mid-trial (80 columns): {mid}")
    print(f"terminal at the end (80 columns, with scrollback): {end}")
    print(f"report.html screenshot: {png}")
    print(f"run: {out}")
    print("--- mid-trial ---")
    print(mid.read_text().rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
