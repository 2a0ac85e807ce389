"""The server's process tree during a trial: every process of it that was running when the
sampler first looked (the server is ready, the load about to begin) must still be running when
the trial ends. A worker killed behind a wrapper shell (`sh -c 'server & ...'`) leaves the
shell alive and the port refusing; this is how such a death is seen.
"""

from __future__ import annotations

import psutil

from .procfs import descendants


def _describe(p: psutil.Process) -> str:
    try:
        cmd = " ".join(p.cmdline()) or p.name()
    except psutil.Error:
        cmd = "?"
    return cmd if len(cmd) <= 80 else cmd[:77] + "..."


def tree_pids(root_pid: int) -> list[int]:
    """root_pid and every process below it."""
    kids = descendants(root_pid)
    if kids is None:
        try:
            kids = [c.pid for c in psutil.Process(root_pid).children(recursive=True)]
        except psutil.Error:
            kids = []
    return [root_pid, *kids]


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class TreeWatch:
    """observe() the tree each sample; ended() lists the first-seen processes that are gone.
    The root itself is left to its parent (trial.py reads its exit status)."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.first: dict[int, tuple[psutil.Process, str]] = {}
        self.gone: dict[int, tuple[str, int]] = {}  # pid -> (command, t_ns first missed)
        self._started = False
        self._procs: dict[int, psutil.Process] = {}  # kept: cpu_percent needs the same object

    def tree(self) -> list[psutil.Process]:
        """The root and its descendants that are running now (zombies left out)."""
        procs = []
        for pid in tree_pids(self.root_pid):
            p = self._procs.get(pid)
            if p is None:
                try:
                    p = self._procs[pid] = psutil.Process(pid)
                except psutil.Error:
                    continue
            if _running(p):
                procs.append(p)
        return procs

    def observe(self, procs: list[psutil.Process], t_ns: int) -> None:
        if not self._started:
            self._started = True
            self.first = {p.pid: (p, _describe(p)) for p in procs if p.pid != self.root_pid}
            return
        for pid, (p, cmd) in self.first.items():
            if pid not in self.gone and not _running(p):
                self.gone[pid] = (cmd, t_ns)

    def reasons(self, load_start_ns: int) -> list[str]:
        """One reason per server process that ended during the trial."""
        out = []
        for pid, (cmd, t_ns) in sorted(self.gone.items(), key=lambda kv: kv[1][1]):
            when = (t_ns - load_start_ns) / 1e9
            out.append(
                f"server process {pid} ({cmd}) ended during the trial (seen gone "
                f"{when:.1f} s after the load began)"
            )
        return out
