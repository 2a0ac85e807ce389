"""`python -m loadgen [--when-told] SPEC.json OUT_DIR`: generate one load phase and write its
columns.

This is how the orchestrator starts a load generator: in its own process, talking only through
files. Exit 0 on success, 2 on a bad spec, 3 (EXIT_CANNOT_WRITE) when OUT_DIR cannot be
written, 1 on an unexpected failure.

--when-told: start, import everything, then wait for a line `go` on stdin before reading
SPEC.json (which need not exist before that line). The orchestrator starts the generator so
while the server starts, and the interpreter's start and imports (~0.2 s a trial) leave the
trial's critical path. Anything else on stdin, or its end, exits 0 having sent nothing.
"""

import errno
import os
import sys

from .parallel import generate_to_dir
from .spec import EXIT_CANNOT_WRITE, LoadSpec

CANNOT_WRITE = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EIO,
    errno.ESTALE,
}


def main(argv: list[str]) -> int:
    told = argv[:1] == ["--when-told"]
    argv = argv[1:] if told else argv
    if len(argv) != 2:
        print("usage: python -m loadgen [--when-told] SPEC.json OUT_DIR", file=sys.stderr)
        return 2
    if told and sys.stdin.readline().strip() != "go":
        return 0  # the trial ended before its load (a server that never started)
    try:
        spec = LoadSpec.load(argv[0])
    except (OSError, ValueError, TypeError) as e:
        print(f"loadgen: bad spec {argv[0]}: {e}", file=sys.stderr)
        return 2
    try:
        generate_to_dir(spec, argv[1])
    except OSError as e:
        if e.errno not in CANNOT_WRITE:
            raise
        try:  # unbuffered: the log may sit on the same full disk
            os.write(2, f"loadgen: cannot write {argv[1]}: {e}\n".encode())
        except OSError:
            pass
        return EXIT_CANNOT_WRITE
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
