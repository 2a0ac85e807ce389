"""The cluster soak (`soak.py --cluster`): one long `perfctl run` on the local 3-host TLS cluster
(server on h1, 2 ms a request at 200/s; shards on h2 and h3) while the faults of issue #31 land
in random trials (each kind at least once, the first 90% of the trials), each while the
trial's shards run:
  - worker: h3's Dask worker SIGKILLed (the trial is invalid, the run stops after host_return;
    `--resume` goes on on a fresh cluster);
  - cut: h3's link down for 3 s, then up (the trial is invalid, "cut off"; the run goes on);
  - scheduler: the scheduler SIGKILLed (the trial is recorded invalid, the run stops with exit
    2; `--resume` goes on);
  - clock: h2's wall clock stepped by +50 ms (libfaketime preloaded into h2's worker through
    PERFCTL_LOCAL_WORKER_ENV; the trial is invalid, "stepped"; the run goes on).
One fault per trial (a fault due while the last one's trial runs waits for the next). Whenever
perfctl stops with exit 2 the soak resumes it, until every trial is recorded.

It reports, and exits 1 unless all hold:
  - finished trials kept: every trial recorded when a perfctl ended is still there, unchanged;
    at the end every planned trial is recorded;
  - every kind of fault landed, and each left its reason on a trial;
  - orphans: no process of the run and no namespace or bridge of its cluster outlives the
    perfctl that made them;
  - each perfctl's open descriptors and RSS, from its first finished trials to its last, grow
    by at most 10% (soak_common.Incarnation; one too short to tell says so).
Needs root, iproute2, gcc and libfaketime (make setup installs them).
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from _common import ROOT, descendants, mark_of, perfctl_argv, poll_until, run_processes
from soak_common import COMPARED, GROWTH_LIMIT, Incarnation, rows, same

# 4 s measured + 0.5 s warm-up + the shards' lead, clocks, fetch, teardown: 100 trials took
# 760 s here, the faults' resumes included
TRIAL_S = 7.5
CUT_S = 3.0
STEP_MS = 50
FAULTS = ("worker", "cut", "scheduler", "clock")
REASON = {  # the words each fault's trial must carry in invalid_reasons
    "worker": "lost",
    "cut": "cut off",
    "scheduler": "the Dask scheduler died",
    "clock": "clock stepped",
}
EXPERIMENT = """
name: soak-cluster
servers: {{c: {{impl: c, model: epoll}}}}
workload: {{path: /work, params: {{spin_us: 2000}}}}
load: {{mode: open, rate: 200, connections: 16, duration: 4s, warmup: 0.5s}}
placement: {{server: {{host: h1}}, loadgen: {{hosts: [h2, h3]}}}}
cluster: {{local: {{hosts: 3}}, host_return: 10s}}
matrix: {{round: {rounds}}}
"""
SHIM = ROOT / "tests" / "cluster" / "monotonic_sleep_shim.c"


@dataclass
class Fault:
    kind: str
    at_s: float  # since the soak began
    rows_before: int  # trials recorded when it landed: it hit a later one


def _worker_env(work: Path, step_file: Path) -> str:
    """PERFCTL_LOCAL_WORKER_ENV preloading libfaketime (and the shim of tests/cluster) into
    h2's worker, its offset read from step_file on every call."""
    lib = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not lib:
        raise SystemExit("libfaketime is missing: run make setup (Debian package faketime)")
    shim = work / "shim.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM), "-ldl"], check=True
    )
    return json.dumps(
        {
            "h2": {
                "LD_PRELOAD": f"{shim} {lib[0]}",
                "FAKETIME_TIMESTAMP_FILE": str(step_file),
                "FAKETIME_NO_CACHE": "1",
                "DONT_FAKE_MONOTONIC": "1",
            }
        }
    )


def _leftovers(pid: int) -> list[str]:
    """Namespaces and the bridge the perfctl process `pid` made (local.py's names)."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return re.findall(rf"^(perfctl-{pid}-\d+)", ns, re.M) + re.findall(
        rf"^\d+:\s+(pcbr{pid})[:@]", links, re.M
    )


def _inject(kind: str, proc: subprocess.Popen, step_file: Path, steps: list[int]) -> bool:
    """Land one fault on perfctl `proc`'s cluster once its shards run (bounded wait). True if
    it landed."""
    tree = poll_until(
        lambda: (
            proc.poll() is None
            and (t := descendants(proc.pid))
            and sum("-m loadgen" in x for x in t.values()) >= 2
            and t
        ),
        timeout_s=60,
    )
    if not tree or proc.poll() is not None:
        return False
    if kind in ("worker", "scheduler"):
        needle = "--name h3" if kind == "worker" else "dask_scheduler"
        pids = [p for (p, _), x in tree.items() if needle in x and "dask" in x]
        for p in pids:
            os.kill(p, signal.SIGKILL)
        return bool(pids)
    if kind == "clock":
        steps.append(steps[-1] + STEP_MS)
        step_file.write_text(f"+{steps[-1] / 1000:.3f}\n")
        return True
    ns = f"perfctl-{proc.pid}-2"  # h3
    links = subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True, text=True)
    veths = [
        ln.split(": ")[1].split("@")[0] for ln in links.stdout.splitlines() if ": lo:" not in ln
    ]
    if not veths:
        return False
    subprocess.run(["ip", "-n", ns, "link", "set", veths[0], "down"], check=False)
    try:
        poll_until(lambda: proc.poll() is not None, timeout_s=CUT_S)
    finally:
        subprocess.run(["ip", "-n", ns, "link", "set", veths[0], "up"], check=False)
    return True


def main(minutes: float) -> int:
    if os.geteuid() != 0:
        raise SystemExit("soak.py --cluster needs root (network namespaces)")
    t0 = time.monotonic()
    total_s = minutes * 60
    rounds = max(len(FAULTS) + 1, round(total_s / TRIAL_S))
    work = Path(tempfile.mkdtemp(prefix="perfctl-soak-cluster-"))
    (work / "exp.yaml").write_text(EXPERIMENT.format(rounds=list(range(1, rounds + 1))))
    step_file = work / "h2-clock"
    step_file.write_text("+0\n")
    out = work / "run"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PERFCTL_LOCAL_WORKER_ENV": _worker_env(work, step_file),
    }
    # the faults in random trials over the first 90% of the soak, each kind at least once;
    # keyed to the trials recorded, not to the clock, so that every one lands however fast
    # the trials go (a 20-minute soak keyed to the clock ran out of trials before its last)
    kinds = list(FAULTS) + [random.choice(FAULTS) for _ in range(max(0, int(minutes / 2) - 4))]
    random.shuffle(kinds)
    first, last = max(1, round(0.05 * rounds)), max(2, round(0.9 * rounds))
    at = sorted(random.sample(range(first, last), min(len(kinds), last - first)))
    plan = list(zip(at, kinds))

    def start(*args: str) -> Incarnation:
        proc = subprocess.Popen(
            perfctl_argv("run", *args, "--no-plots"),
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        return Incarnation(proc, len(rows(out)))

    lives = [start(str(work / "exp.yaml"), "--out", str(out))]
    marks = {mark_of(lives[0].proc.pid)}
    faults: list[Fault] = []
    steps = [0]
    kept: list[pd.DataFrame] = []  # the rows recorded as each perfctl ended
    orphans: list[str] = []
    exits: list[int] = []
    last_stderr = ""
    while True:
        life = lives[-1]
        while life.proc.poll() is None:
            life.sample(len(rows(out)))
            now = time.monotonic() - t0
            before = len(rows(out))
            # one fault per trial: the next waits until the last one's trial is recorded
            if plan and before >= plan[0][0] and (not faults or before > faults[-1].rows_before):
                _, kind = plan.pop(0)
                if _inject(kind, life.proc, step_file, steps):
                    faults.append(Fault(kind, now, before))
                else:
                    plan.insert(0, (before, kind))  # between trials or ending: the next one
            time.sleep(1.0)
        last_stderr = life.proc.stderr.read()
        exits.append(life.proc.returncode)
        kept.append(rows(out))
        pid = life.proc.pid
        poll_until(lambda: not (run_processes(out, marks) or _leftovers(pid)), 30)  # noqa: B023
        orphans += run_processes(out, marks) + _leftovers(pid)
        if life.proc.returncode != 2 or len(lives) > 4 * len(FAULTS):
            break
        lives.append(start("--resume", str(out)))
        marks.add(mark_of(lives[-1].proc.pid))

    final = rows(out)
    key = ["cell_id", "trial"]
    lost = changed = 0
    for before in kept[:-1]:
        if not len(before):
            continue
        # a run stopped at its first trial has only that trial's (zero-load) columns
        cols = [c for c in COMPARED if c in before and c in final]
        m = before[key + cols].merge(
            final[key + cols], on=key, how="left", suffixes=("", "_now"), indicator=True
        )
        lost += int((m["_merge"] != "both").sum())
        changed += sum(int((~same(m[c], m[f"{c}_now"])).sum()) for c in cols)
    reasons = final["invalid_reasons"].fillna("").astype(str) if len(final) else pd.Series([])
    print(
        f"soak --cluster: {minutes:g} min, {rounds} trials planned, {len(final)} recorded, "
        f"{int((~final['valid'].astype(bool)).sum()) if len(final) else 0} invalid; "
        f"{len(lives)} perfctl run(s) (exits {exits})"
    )
    ok = lost == 0 and changed == 0 and len(final) == rounds and exits[-1] == 0
    print(f"finished trials kept across the stops: lost {lost}, changed {changed}")
    print("fault      at (s)  trials before  trials with its reason")
    for f in faults:
        hit = int(reasons.str.contains(REASON[f.kind], regex=False).sum())
        ok = ok and hit > 0
        print(f"{f.kind:<10} {f.at_s:6.0f}  {f.rows_before:13d}  {hit}")
    missing = [k for k in FAULTS if k not in {f.kind for f in faults}]
    if missing:
        print(f"faults that never landed (no trial running at their time): {missing}")
        ok = False
    print(f"orphans (processes, namespaces, bridges): {len(orphans)} {orphans or ''}")
    ok = ok and not orphans
    for i, life in enumerate(lives, 1):
        g = life.growth()
        if g is None:
            print(f"perfctl #{i}: too short to measure growth")
            continue
        (a, r0, fd0, rss0), (b, r1, fd1, rss1) = g
        fd_growth, rss_growth = fd1 / fd0 - 1, rss1 / rss0 - 1
        ok = ok and fd_growth <= GROWTH_LIMIT and rss_growth <= GROWTH_LIMIT
        print(
            f"perfctl #{i}: over {b - a:.0f} s and {r1 - r0:.0f} trials: fds {fd0:.0f} -> "
            f"{fd1:.0f} ({fd_growth:+.0%}), RSS {rss0:.1f} -> {rss1:.1f} MiB ({rss_growth:+.0%})"
        )
    if exits[-1] != 0:
        print(f"the last perfctl exited {exits[-1]}: {last_stderr[-2000:]}")
    print("PASS" if ok else "FAIL", f"(results in {out})")
    return 0 if ok else 1
