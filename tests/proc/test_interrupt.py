"""Ctrl-C during a fork (proc/interrupt.py): Python drops the KeyboardInterrupt that a fork hook
raises, so perfctl writes the request down and raises it again at a safe point."""

import subprocess
import sys
import textwrap

from orchestrator.proc import interrupt

SCRIPT = textwrap.dedent(
    """
    import logging, os, signal, subprocess
    from orchestrator.proc import interrupt
    interrupt.install()
    # the signal lands while the child is being forked: its handler then runs in an after-fork
    # hook (logging has one), where an exception is printed as "Exception ignored" and dropped.
    # The hooks run when Popen has a preexec_fn, as perfctl's spawns do (proc/process.py)
    os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))
    try:
        subprocess.run(["true"], preexec_fn=lambda: None)
        print("went on", interrupt.pending())
        interrupt.check()
    except KeyboardInterrupt:
        print("stopped")
    """
)


def test_a_sigint_during_a_fork_is_dropped_by_python_and_kept_by_perfctl():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    # dropped by Python (it went on), silently (no "Exception ignored" traceback), kept by perfctl
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr
    assert out.stdout.split() == ["went", "on", "True", "stopped"], out.stdout + out.stderr


def test_handled_clears_the_request():
    try:
        interrupt.on_signal(2, None)
    except KeyboardInterrupt:
        pass
    assert interrupt.pending()
    interrupt.handled()
    assert not interrupt.pending()
    interrupt.check()  # nothing to raise
