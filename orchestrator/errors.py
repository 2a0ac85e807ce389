"""The one user-facing error type, caught at the CLI boundary and mapped to exit code 2, and
the one wording of a file the user named that cannot be read."""

from pathlib import Path


class PerfctlError(Exception):
    """A problem the user can fix: bad input, a server that would not start, a taken port.

    The message is one paragraph that names the file, the key and the fix. The CLI prints it
    without a traceback and exits with status 2.
    """

    exit_code = 2


class RunStopped(PerfctlError):
    """The run cannot go on, found during a trial. `row` is that trial's row (invalid, its
    reason saying why) when it got far enough to have one: the run records it before it
    stops, so `--resume` runs only the trials after it."""

    row: dict | None = None


def read_user_file(path, what: str, fix: str) -> str:
    """The text of a file the user named, or the PerfctlError saying it cannot be read:
    "<path>: cannot read the <what> (<why>). Fix: <fix>"."""
    try:
        return Path(path).read_text()
    except OSError as e:
        raise PerfctlError(f"{path}: cannot read the {what} ({e.strerror}). Fix: {fix}") from None
