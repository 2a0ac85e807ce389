"""Soak: one long `perfctl run` of open and closed cells while a chaos thread kills the server
every ~2 minutes, and perfctl itself is killed once with SIGKILL halfway and then resumed.

    .venv/bin/python benchmarks/soak.py [--minutes 20]

It reports, and exits 1 unless all hold:
  - finished trials kept: every trial recorded before the kill -9 is still in trials.csv,
    unchanged, and the run ends with every trial recorded;
  - orphans: no process of the run outlives perfctl, after the kill -9 and at the end;
  - perfctl's open descriptors and RSS, from its first finished trial to its last, grow by
    at most 10% (for each of the two perfctl processes: before and after the kill).
Not part of `make test`: a 20-minute figure belongs on a quiet machine.

    .venv/bin/python benchmarks/soak.py --cluster [--minutes 20]

runs the cluster soak instead: the local 3-host TLS cluster with issue #31's faults at random
times (soak_cluster.py).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
from _common import ROOT, descendants, mark_of, perfctl_argv, poll_until, run_processes, still_alive
from soak_common import COMPARED, GROWTH_LIMIT, Incarnation, rows, same

TRIAL_S = 7.0  # 4 s measured + 0.5 s warm-up + start, probes and teardown
SERVER_KILL_EVERY_S = 120.0
EXPERIMENT = """
name: soak
servers:
  py: {{impl: python, model: async}}
workload: {{path: /work, params: {{spin_us: 50}}}}
load: {{mode: "{{mode}}", rate: 300, connections: 8, duration: 4s, warmup: 0.5s}}
matrix: {{round: {rounds}, mode: [open, closed]}}
"""  # `round` interleaves the modes: open, closed, open, closed, ...


class Chaos(threading.Thread):
    """Kills the running server (SIGKILL to the bundled server process) every `every_s`."""

    def __init__(self, current, every_s: float, t0: float) -> None:
        super().__init__(name="chaos", daemon=True)
        self.current, self.every_s, self.t0 = current, every_s, t0
        self.kills: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every_s * random.uniform(0.8, 1.2)):
            proc = self.current()
            servers = [
                pid
                for (pid, _), text in descendants(proc.pid).items()
                if "servers/python/server.py" in text
            ]
            for pid in servers:
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.kills.append(f"t={time.monotonic() - self.t0:.0f}s server {pid}")
                except ProcessLookupError:
                    pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0, help="length of the soak")
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="the local 3-host TLS cluster with faults at random times (soak_cluster.py)",
    )
    args = ap.parse_args()
    if args.cluster:
        import soak_cluster  # its own imports (root, namespaces) only when asked

        return soak_cluster.main(args.minutes)
    t0 = time.monotonic()
    total_s = args.minutes * 60
    rounds = max(2, round(total_s / TRIAL_S / 2))
    work = Path(tempfile.mkdtemp(prefix="perfctl-soak-"))
    (work / "exp.yaml").write_text(EXPERIMENT.format(rounds=list(range(1, rounds + 1))))
    out = work / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def start(*extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            perfctl_argv("run", *extra, "--no-plots"),
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    lives = [Incarnation(start(str(work / "exp.yaml"), "--out", str(out)), 0)]
    marks = {mark_of(lives[0].proc.pid)}
    chaos = Chaos(lambda: lives[-1].proc, min(SERVER_KILL_EVERY_S, total_s / 3), t0)
    chaos.start()
    kill_at = t0 + total_s * 0.55
    kept_before = pd.DataFrame()
    orphans_after_kill: list[str] = []
    while lives[-1].proc.poll() is None:
        now_rows = len(rows(out))
        lives[-1].sample(now_rows)
        if len(lives) == 1 and time.monotonic() >= kill_at:
            tree = descendants(lives[0].proc.pid)
            kept_before = rows(out)
            lives[0].proc.send_signal(signal.SIGKILL)
            lives[0].proc.wait(30)
            poll_until(lambda tree=tree: not (still_alive(tree) or run_processes(out, marks)), 10)
            orphans_after_kill = still_alive(tree) + run_processes(out, marks)
            lives.append(Incarnation(start("--resume", str(out)), len(kept_before)))
            marks.add(mark_of(lives[-1].proc.pid))
        time.sleep(1.0)
    chaos.stop.set()
    final_stderr = lives[-1].proc.stderr.read()
    poll_until(lambda: not run_processes(out, marks), 10)
    orphans_at_end = run_processes(out, marks)

    final = rows(out)
    key = ["cell_id", "trial"]
    merged = (
        kept_before[key + list(COMPARED)].merge(
            final[key + list(COMPARED)], on=key, how="left", suffixes=("", "_now"), indicator=True
        )
        if len(kept_before)
        else pd.DataFrame()
    )
    lost = int((merged["_merge"] != "both").sum()) if len(merged) else 0
    changed = (
        sum(int((~same(merged[c], merged[f"{c}_now"])).sum()) for c in COMPARED)
        if len(merged)
        else 0
    )
    expected = 2 * rounds
    print(
        f"soak: {args.minutes:g} min, {expected} trials planned, {len(final)} recorded, "
        f"{int((~final['valid'].astype(bool)).sum()) if len(final) else 0} invalid "
        f"(servers killed: {len(chaos.kills)}), perfctl killed once (kill -9) and resumed"
    )
    print(
        f"finished trials kept across the kill -9: {len(kept_before) - lost - changed}/"
        f"{len(kept_before)} (lost {lost}, changed {changed})"
    )
    for c in COMPARED if len(merged) else ():
        for _, r in merged[~same(merged[c], merged[f"{c}_now"])].iterrows():
            print(
                f"  changed: {r['cell_id']} trial {r['trial']} {c}: {r[c]!r} -> {r[f'{c}_now']!r}"
            )
    print(
        f"orphans: {len(orphans_after_kill)} after the kill -9, {len(orphans_at_end)} at "
        f"the end {orphans_after_kill + orphans_at_end or ''}"
    )
    ok = (
        lost == 0
        and changed == 0
        and len(final) == expected
        and not orphans_after_kill
        and not orphans_at_end
        and lives[-1].proc.returncode == 0
    )
    for i, life in enumerate(lives, 1):
        g = life.growth()
        if g is None:
            print(f"perfctl #{i}: too short to measure growth")
            continue
        (t0, r0, fd0, rss0), (t1, r1, fd1, rss1) = g
        fd_growth, rss_growth = fd1 / fd0 - 1, rss1 / rss0 - 1
        ok = ok and fd_growth <= GROWTH_LIMIT and rss_growth <= GROWTH_LIMIT
        print(
            f"perfctl #{i}: over {t1 - t0:.0f} s and {r1 - r0:.0f} trials: fds {fd0:.0f} -> "
            f"{fd1:.0f} ({fd_growth:+.0%}), RSS {rss0:.1f} -> {rss1:.1f} MiB "
            f"({rss_growth:+.0%})"
        )
    if lives[-1].proc.returncode != 0:
        print(f"the resumed perfctl exited {lives[-1].proc.returncode}: {final_stderr[-2000:]}")
    print("PASS" if ok else "FAIL", f"(results in {out})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
