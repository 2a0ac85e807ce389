"""The one user-facing error type, caught at the CLI boundary and mapped to exit code 2."""


class PerfctlError(Exception):
    """A problem the user can fix: bad input, a server that would not start, a taken port.

    The message is one paragraph that names the file, the key and the fix. The CLI prints it
    without a traceback and exits with status 2.
    """

    exit_code = 2
