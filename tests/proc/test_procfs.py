"""procfs.alive: the one answer to "is this process still running?" that the leftovers
clean-up, the netem namespaces and the local cluster's bridges all use."""

import os
import subprocess
import sys

from orchestrator.proc import procfs


def test_a_zombie_child_reads_as_not_alive_though_its_pid_still_exists():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert procfs.alive(child.pid)  # or it already exited: then it is a zombie below
        # block until the child has exited, without reaping it: it stays a zombie
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        os.kill(child.pid, 0)  # the pid is still there (no ProcessLookupError) ...
        assert procfs._stat_fields(child.pid)[0] == "Z"  # ... as a zombie
        assert not procfs.alive(child.pid)
        assert not procfs.alive(child.pid, procfs.start_ticks(child.pid))
    finally:
        child.wait()
    assert not procfs.alive(child.pid)  # reaped: gone altogether


def test_a_running_process_is_alive_only_under_its_own_start_time():
    me = os.getpid()
    start = procfs.start_ticks(me)
    assert procfs.alive(me) and procfs.alive(me, start)
    assert not procfs.alive(me, start + 1)  # a later process that got the same pid
