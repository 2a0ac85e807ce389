"""Descriptor limits, checked before the first trial: a server holds one descriptor per
connection, and a run whose `connections` exceed RLIMIT_NOFILE fails every connect with EMFILE
(the trial then says "no request completed" after its whole duration, with no error counted).
"""

from __future__ import annotations

import resource

from ..errors import PerfctlError

FD_MARGIN = 64  # listening socket, logs, the corpus, epoll/event fds, a JVM's jars


def descriptors_needed(connections: int) -> int:
    """Descriptors one process needs to hold `connections` connections at once. The server
    holds every connection in one process; each load-generator process holds its share
    (loadgen splits `connections` over `processes`), so the server's need is the larger."""
    return connections + FD_MARGIN


def ensure_fd_limit(cells, source: str) -> int:
    """Raise this process's soft RLIMIT_NOFILE (inherited by every server and load generator
    it starts) to what the largest `connections` of any cell needs, when the hard limit
    allows. Returns the soft limit in force. Raises PerfctlError naming the limit and the fix
    when the hard limit is too low."""
    worst = max(cells, key=lambda c: c.load.connections, default=None)
    if worst is None:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    need = descriptors_needed(worst.load.connections)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if need <= soft:
        return soft
    if hard == resource.RLIM_INFINITY or need <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return need
    raise PerfctlError(
        f"{source}: key `load.connections`: {worst.load.connections} connections (cell "
        f"{worst.label}) need about {need} open files in one process, but the hard limit on "
        f"open files (RLIMIT_NOFILE, `ulimit -Hn`) is {hard}. Fix: lower load.connections to "
        f"at most {hard - FD_MARGIN}, or raise the hard limit before running perfctl (as root: "
        f"`ulimit -Hn {need}`; for a service, LimitNOFILE=; for a login, nofile in "
        "/etc/security/limits.conf)."
    )
