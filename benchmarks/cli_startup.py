"""How long the light commands take as whole processes, beside programs that answer at once.

  .venv/bin/python benchmarks/cli_startup.py [--runs 15] [--checkout DIR ...]

Times `perfctl --help`, `perfctl --version`, `perfctl plan experiments.yaml` and `perfctl
doctor` (its static checks: `--no-measure` where doctor measures the host by default) (each `python -m orchestrator.cli ...` run in the checkout: the imports of the
`perfctl` script), `python -c pass` (the interpreter's own start) and, where installed,
`wrk --version` and `oha --version`. Every command runs once per round, --runs rounds,
round-robin, so a neighbour's load falls on all of them alike. Each row prints the median
wall time, the fastest run, the median CPU time (user + system from the child's rusage: what
the command itself costs, which a busy host inflates far less than the wall time) and the
median's ratio to `python -c pass`. Issue 30's goal: every perfctl row under 0.3 s on an idle
host.

--checkout (repeatable; default this checkout) times other checkouts in the same rounds, with
this interpreter: a before/after table under the same load, e.g. with `git worktree add
/tmp/before <commit>`. Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 0.3
PERFCTL_ARGS = (["--help"], ["--version"], ["plan", "experiments.yaml"], ["doctor"])
BASELINE = "python -c pass"


def commands(checkouts: list[Path]) -> list[tuple[Path, str, list[str]]]:
    """(cwd, label, argv) of everything timed: each checkout's perfctl commands, then the
    baselines (run in the first checkout)."""
    perfctl = [sys.executable, "-m", "orchestrator.cli"]
    out = [
        (c, "perfctl " + " ".join(a), perfctl + a)
        for c in checkouts
        for a in (_static(c, a) for a in PERFCTL_ARGS)
    ]
    out.append((checkouts[0], BASELINE, [sys.executable, "-c", "pass"]))
    for tool in ("wrk", "oha"):
        if shutil.which(tool):
            out.append((checkouts[0], f"{tool} --version", [shutil.which(tool), "--version"]))
    return out


def _static(checkout: Path, args: list[str]) -> list[str]:
    """`doctor` as its static checks: where the checkout's doctor also measures the host for
    ~2 s by default (`--measure`), that measurement is work asked for, not start-up, so it is
    left out with --no-measure."""
    doctor = checkout / "orchestrator" / "cli" / "doctor.py"
    if args == ["doctor"] and doctor.is_file() and "--no-measure" in doctor.read_text():
        return ["doctor", "--no-measure"]
    return args


def time_once(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(wall time, CPU time) of one run, in seconds. A perfctl command that fails stops the
    benchmark (a fast error is not a fast command)."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed_s = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0 and "orchestrator.cli" in argv:
            out.seek(0)
            sys.exit(f"{' '.join(argv)} in {cwd} exited {proc.returncode}:\n{out.read().decode()}")
    return elapsed_s, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="rounds of every command")
    ap.add_argument(
        "--checkout", type=Path, action="append", help="a checkout to time (repeatable)"
    )
    args = ap.parse_args()
    checkouts = [c.resolve() for c in args.checkout or [ROOT]]
    todo = commands(checkouts)
    for cwd, _, argv in todo:  # one untimed round: the page cache and __pycache__ are warm
        time_once(argv, cwd)
    wall_s: dict[tuple, list[float]] = {(cwd, label): [] for cwd, label, _ in todo}
    cpu_s: dict[tuple, list[float]] = {(cwd, label): [] for cwd, label, _ in todo}
    load_before = os.getloadavg()[0]
    for _ in range(args.runs):
        for cwd, label, argv in todo:
            wall, cpu = time_once(argv, cwd)
            wall_s[cwd, label].append(wall)
            cpu_s[cwd, label].append(cpu)
    python_s = statistics.median(wall_s[checkouts[0], BASELINE])
    print(
        f"{args.runs} runs each, round-robin; load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; {sys.executable}"
    )
    for checkout in checkouts:
        print(f"\n{checkout}")
        print(
            f"{'command':<32} {'median ms':>10} {'min ms':>8} {'cpu ms':>8} {'x python':>9}"
            f"  goal < {GOAL_S} s"
        )
        for cwd, label, _ in todo:
            if cwd != checkout and label.startswith("perfctl"):
                continue
            median_s = statistics.median(wall_s[cwd, label])
            verdict = ("ok" if median_s < GOAL_S else "SLOW") if label.startswith("perfctl") else ""
            print(
                f"{label:<32} {median_s * 1e3:>10.0f} {min(wall_s[cwd, label]) * 1e3:>8.0f} "
                f"{statistics.median(cpu_s[cwd, label]) * 1e3:>8.0f} "
                f"{median_s / python_s:>8.1f}x  {verdict}"
            )


if __name__ == "__main__":
    main()
