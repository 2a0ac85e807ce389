"""Ctrl-C and SIGTERM that are never lost. Python runs a signal's handler at the next bytecode,
and when that bytecode belongs to an os.fork hook (logging registers one; every
subprocess.Popen runs them) the KeyboardInterrupt it raises is printed as "Exception ignored"
and dropped: the run went on to its end and exited 0 (seen in CI: SIGINT while trial 2's server
was being started). So the handler also writes the request down, and the run loops ask at a
safe point, after a trial's row is kept (`check`), raising it again if it was swallowed."""

from __future__ import annotations

import signal
import sys

_pending: list[int] = []  # signals received and not yet turned into perfctl's clean stop


def on_signal(signum, frame) -> None:
    """The handler for SIGINT and SIGTERM that the CLI installs (`install`)."""
    _pending.append(signum)
    raise KeyboardInterrupt


def _unraisable(hook):
    """sys.unraisablehook that stays silent for the KeyboardInterrupt this module raised and
    Python dropped (it is acted on at the next check): no "Exception ignored" traceback."""

    def quiet(info) -> None:
        if issubclass(info.exc_type, KeyboardInterrupt) and _pending:
            return
        hook(info)

    return quiet


def install() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    sys.unraisablehook = _unraisable(sys.__unraisablehook__)


def pending() -> bool:
    """A stop was asked for and has not been handled yet."""
    return bool(_pending)


def handled() -> None:
    """The clean stop is under way (cli/main.py): later checks must not raise again."""
    _pending.clear()


def check() -> None:
    """At a safe point of a run loop: raise the KeyboardInterrupt a fork hook swallowed."""
    if _pending:
        raise KeyboardInterrupt
