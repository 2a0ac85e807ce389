"""The one process supervisor: every process perfctl starts (servers and their wrappers,
injection proxies, load generators) is started here, and dies with perfctl, however perfctl
dies. Three mechanisms, because each alone has a hole:

- Each child runs in its own session (a process group of its own); `terminate()` and
  `stop_all()` (the CLI's signal handlers and finally blocks) signal the whole group, so a
  wrapper's children (`sh -c 'server & wait'`, the load generator's worker processes) go too.
- PR_SET_PDEATHSIG(SIGKILL), set in the child before exec: the kernel kills the child when
  perfctl dies, even by SIGKILL. It covers only the direct child, and it fires when the
  *thread* that forked exits, so it is set only for children spawned from the main thread
  (perfctl spawns from nowhere else; a child spawned from another thread relies on the rest).
- The guardian (guardian.py): a watchdog process in its own session that perfctl tells about
  every group it starts and stops. On perfctl's death it SIGKILLs those groups and every
  process carrying perfctl's mark in its environment (PERFCTL_SUPERVISOR, which every child
  and grandchild inherits), and runs registered clean-up commands (network namespaces).

While a run records (`record_in(run_dir)`), run_dir/children.json lists the live children
(leftovers.py), so a later `perfctl run` or `--resume` can reap what a crashed run left if
even the guardian was killed.
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..errors import PerfctlError
from . import leftovers, procfs
from .guardian import message

ROOT = Path(__file__).resolve().parents[2]
SUPERVISOR_ENV = leftovers.SUPERVISOR_ENV
CHILD_ENV = "PERFCTL_CHILD"  # `<supervisor mark>:<n>`: which spawn a process descends from
# set to a reason, perfctl starts no process: the test suite's unit tier sets it (tests/conftest.py),
# so a test there that would start a server, a proxy or a load generator fails, naming its tier
NO_SPAWN_ENV = "PERFCTL_NO_SPAWN"
PR_SET_PDEATHSIG = 1

CHILDREN: set[subprocess.Popen] = set()
_meta: dict[int, dict] = {}  # pid -> {"pid", "pgid", "start", "argv", "child"}
_cleanup: dict[str, list[list[str]]] = {}  # key -> commands the guardian runs if perfctl dies
_record: Path | None = None
_guardian: dict = {}  # {"owner": pid, "proc": Popen, "fd": write end}
_hidden: set[str] = set()  # secrets (service passwords) no record or message may show
_lock = threading.RLock()
_spawns = itertools.count(1)
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def supervisor_mark() -> str:
    """`<pid>.<start>` of this perfctl process: the value of PERFCTL_SUPERVISOR in every
    process it starts (and so the way to find them, and to tell whether their owner lives)."""
    pid = os.getpid()
    return f"{pid}.{procfs.start_ticks(pid)}"


def hide(secret: str) -> None:
    """From now on, redacted() and children.json show *** for secret (a service password
    that a command line may carry)."""
    if secret:
        _hidden.add(secret)


def redacted(text: str) -> str:
    """text with every hidden secret replaced by ***."""
    for secret in _hidden:
        text = text.replace(secret, "***")
    return text


def _die_with_parent(parent_pid: int, user: tuple[int, int] | None = None, in_main: bool = True):
    """preexec_fn: SIGKILL this child when the forking thread dies (only when that thread is
    the main one); if the parent is already gone (it died between fork and here), die now.
    user: (uid, gid) to run as, set first, since a change of credentials clears the
    parent-death signal."""

    def setup() -> None:
        if user is not None:
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
        if not in_main:
            return
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return setup


def die_with_parent(parent_pid: int):
    """A function for a forked child to call first: it is SIGKILLed when parent_pid's main
    thread dies, or exits now if that already happened (analysis/draw_pool.py's drawers)."""
    return _die_with_parent(parent_pid)


def _popen(
    argv: list[str], env: dict | None = None, user: tuple[int, int] | None = None, **kw
) -> subprocess.Popen:
    """subprocess.Popen in a new session, marked, killed with perfctl, told to the guardian;
    as user (uid, gid) when given (perfctl runs as root)."""
    if os.environ.get(NO_SPAWN_ENV):
        raise PerfctlError(
            f"perfctl may start no process here ({NO_SPAWN_ENV}: {os.environ[NO_SPAWN_ENV]}); "
            f"it was asked to start {argv[0]!r}."
        )
    env = dict(os.environ if env is None else env)
    env[SUPERVISOR_ENV] = supervisor_mark()
    env[CHILD_ENV] = f"{env[SUPERVISOR_ENV]}:{next(_spawns)}"
    in_main = threading.current_thread() is threading.main_thread()
    with _lock:
        _ensure_guardian()
        kw.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(
            argv,
            env=env,
            start_new_session=True,
            preexec_fn=(_die_with_parent(os.getpid(), user, in_main) if in_main or user else None),
            **kw,
        )
        CHILDREN.add(proc)
        _meta[proc.pid] = {
            "pid": proc.pid,
            "pgid": proc.pid,
            "argv": [redacted(a) for a in argv],
            "start": procfs.start_ticks(proc.pid),
            "child": env[CHILD_ENV],
        }
        _tell("group", proc.pid, _meta[proc.pid]["start"])
        _write_record()
    return proc


def spawn(
    argv: list[str],
    log_path: Path | None = None,
    cpus: list[int] | None = None,
    cwd: Path | None = None,
    env: dict | None = None,
    user: tuple[int, int] | None = None,
    stdin_pipe: bool = False,
) -> subprocess.Popen:
    """Start argv in a new session (own process group), optionally pinned with taskset, and
    as another user (uid, gid) when given.

    stdout and stderr go to log_path (or are discarded); stdin is a pipe with stdin_pipe
    (proc.stdin), else /dev/null. The process is registered for stop_all() and dies with
    perfctl (module docstring). Call from the main thread.
    """
    if cpus:
        argv = ["taskset", "-c", ",".join(map(str, cpus)), *argv]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    stdin = subprocess.PIPE if stdin_pipe else subprocess.DEVNULL
    try:
        return _popen(
            argv, env=env, user=user, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, stdin=stdin
        )
    except FileNotFoundError as e:
        raise PerfctlError(
            f"cannot start {argv[0]!r}: {e.strerror}. Fix: install it or give "
            "the full path in the server's cmd."
        ) from None
    finally:
        if log_path:
            out.close()


def run_to_end(
    argv: list[str],
    log_path: Path,
    timeout_s: float,
    cwd: Path | None = None,
    env: dict | None = None,
    user: tuple[int, int] | None = None,
) -> int | None:
    """spawn() argv and wait for it: its exit code, or None when it ran past timeout_s (it is
    then stopped). A short-lived helper (initdb, psql) is supervised like any server."""
    proc = spawn(argv, log_path, cwd=cwd, env=env, user=user)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        terminate(proc)
        return None
    terminate(proc)  # reaps it, and anything it left in its group
    return proc.returncode


def run_to_files(
    argv: list[str], stdout_path: Path, stderr_path: Path, timeout_s: float
) -> int | None:
    """Run argv to its end like spawn() (its own group, dies with perfctl), stdout and stderr
    into files of their own. Its exit code, or None when it ran past timeout_s (then it is
    stopped)."""
    with open(stdout_path, "wb") as out, open(stderr_path, "ab") as err:
        try:
            proc = _popen(argv, stdout=out, stderr=err)
        except FileNotFoundError as e:
            raise PerfctlError(f"cannot start {argv[0]!r}: {e.strerror}.") from None
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        terminate(proc)
        return None


def terminate(proc: subprocess.Popen, grace_s: float = 3.0) -> int | None:
    """SIGTERM the process group, then SIGKILL after grace_s. Returns the exit code."""
    pgid = proc.pid  # every child leads its own session, so its group id is its pid
    if proc.poll() is None:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:  # children of the group that outlived its leader, too
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    meta = _meta.get(proc.pid)
    if meta is not None:  # and descendants that left the group (setsid) but kept the mark
        _kill_marked(f"{CHILD_ENV}={meta['child']}".encode())
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    with _lock:
        CHILDREN.discard(proc)
        if _meta.pop(proc.pid, None) is not None:
            _tell("ungroup", pgid)
            _write_record()
    for pipe in (proc.stdin, proc.stdout):
        if pipe:
            try:
                pipe.close()
            except OSError:  # a write end whose reader died with unread bytes in it
                pass
    return proc.returncode


def _kill_marked(entry: bytes, rounds: int = 5) -> None:
    """SIGKILL every live process whose environment holds entry, again while more appear."""
    for _ in range(rounds):
        found = procfs.marked(entry, exclude=os.getpid())
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)


def stop_all() -> None:
    for proc in list(CHILDREN):
        terminate(proc, grace_s=1.0)


def at_death(key: str, commands: list[list[str]]) -> None:
    """Have the guardian run `commands` if perfctl dies before `forget(key)` (for what is no
    process: a network namespace). key: no spaces."""
    with _lock:
        _ensure_guardian()
        _cleanup[key] = [list(c) for c in commands]
        _tell("atdeath", key, json.dumps(_cleanup[key]))
        _write_record()


def forget(key: str) -> None:
    with _lock:
        if _cleanup.pop(key, None) is not None:
            _tell("forget", key)
            _write_record()


def record_in(run_dir: Path | None) -> None:
    """Keep run_dir/children.json up to date from now on; None stops recording and removes
    the record (the run ended with nothing left running)."""
    global _record
    with _lock:
        if run_dir is None and _record is not None and not _meta:
            try:
                _record.unlink(missing_ok=True)
            except OSError:
                pass
        _record = run_dir / leftovers.RECORD if run_dir is not None else None
        _write_record()


def reap_leftovers(run_dir: Path | None = None) -> list[str]:
    """Stop what crashed perfctl processes left running (leftovers.py): anything carrying the
    mark of a perfctl that is gone, and what run_dir/children.json lists. Returns one short
    description per process stopped."""
    record = leftovers.read_record(run_dir) if run_dir is not None else None
    return leftovers.reap(supervisor_mark(), record, run_dir)


def run_owner(run_dir: Path) -> int | None:
    """The pid of another perfctl process that is writing run_dir right now, or None."""
    record = leftovers.read_record(run_dir)
    if record is None or record["supervisor"] == supervisor_mark():
        return None
    if not leftovers.supervisor_alive(record["supervisor"]):
        return None
    return int(record["supervisor"].partition(".")[0])


def _write_record() -> None:
    if _record is not None:
        leftovers.write_record(_record, supervisor_mark(), list(_meta.values()), _cleanup)


def _ensure_guardian() -> None:
    """Start this process's guardian unless it runs (once per process; again if it died)."""
    g = _guardian
    if g.get("owner") == os.getpid() and g["proc"].poll() is None:
        return
    # unmarked: a guardian must outlive an outer supervisor's clean-up of this perfctl
    env = {k: v for k, v in os.environ.items() if k not in (SUPERVISOR_ENV, CHILD_ENV)}
    read_fd, write_fd = os.pipe()  # non-inheritable: only the guardian gets the read end
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.proc.guardian", supervisor_mark()],
            stdin=read_fd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
    finally:
        os.close(read_fd)
    if g.get("owner") == os.getpid():
        os.close(g["fd"])
    _guardian.update(owner=os.getpid(), proc=proc, fd=write_fd)
    for meta in _meta.values():  # a restarted guardian learns what the dead one knew
        _tell("group", meta["pgid"], meta["start"])
    for key, commands in _cleanup.items():
        _tell("atdeath", key, json.dumps(commands))


@atexit.register
def _dismiss_guardian(wait_s: float = 3.0) -> None:
    """At exit, close the guardian's pipe and wait for it: it ends whatever still runs, then
    exits, so no process of perfctl's (the guardian included) outlives a normal exit."""
    if _guardian.get("owner") != os.getpid():
        return
    os.close(_guardian.pop("fd"))
    proc = _guardian.pop("proc")
    _guardian.clear()
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        pass


def _tell(*words) -> None:
    if _guardian.get("owner") != os.getpid():
        return
    try:
        os.write(_guardian["fd"], message(*words))
    except OSError:
        pass  # the guardian died: the next spawn starts another one


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"


def spawn_until_line(argv: list[str], timeout_s: float, what: str, stdin_pipe: bool = False):
    """Start argv like spawn(), with stdout piped, and wait for its first stdout line (a
    server or proxy announcing where it listens). Returns (proc, first line, stderr file);
    the caller closes the stderr file. stdin_pipe: proc.stdin is a pipe to write commands to
    (else /dev/null). Raises PerfctlError with its stderr when no line comes within timeout_s."""
    err = tempfile.TemporaryFile()
    try:
        proc = _popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
        )
    except FileNotFoundError as e:
        err.close()
        raise PerfctlError(f"cannot start {what} ({argv[0]!r}): {e.strerror}.") from None
    deadline = time.monotonic() + timeout_s
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
        elif proc.poll() is not None:
            break
    if not line.endswith(b"\n"):
        terminate(proc)
        err.seek(0)
        msg = err.read().decode(errors="replace").strip()
        err.close()
        raise PerfctlError(
            f"{what} did not start ({' '.join(argv)}): "
            f"{msg or f'no first line within {timeout_s:.0f} s'}"
        )
    return proc, line.decode().strip(), err
