"""The guardian: one small watchdog process per perfctl process that ends everything perfctl
started when perfctl dies, however it dies (SIGKILL, OOM killer, a crash).

    python -m orchestrator.proc.guardian MARK        (started by process.py, never by hand)

It runs in its own session (a signal to perfctl's process group does not reach it) and reads
perfctl's messages from a pipe whose only write end perfctl holds. When perfctl dies the
kernel closes that end; the guardian reads EOF and then, in this order:
  1. SIGKILLs every process group it was told about and not told to forget (a group whose
     leader's pid now belongs to a process that started later is left alone: pid reuse);
  2. SIGKILLs every process whose environment carries MARK (PERFCTL_SUPERVISOR=<pid>.<start>
     of its perfctl), again until none is left: this catches grandchildren that left their
     group (a server that calls setsid) as long as they keep their environment;
  3. runs the clean-up commands it was told about (e.g. `ip netns del perfctl-...`).
When perfctl exits normally it has already stopped everything, so steps 1-3 find nothing.

Messages are lines (`message()` builds them): `group PGID START`, `ungroup PGID`,
`atdeath KEY JSON-LIST-OF-ARGV`, `forget KEY`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from . import procfs

KILL_ROUNDS = 40  # marked processes may fork while we kill: scan again, bounded
KILL_PAUSE_S = 0.025
COMMAND_TIMEOUT_S = 10.0


def message(verb: str, *args) -> bytes:
    """One protocol line: message("group", 1234, 98765) -> b"group 1234 98765\\n"."""
    return (" ".join([verb, *map(str, args)]) + "\n").encode()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def end_everything(mark: bytes, groups: dict[int, int], commands: dict[str, list]) -> None:
    """Steps 1-3 of the module docstring."""
    for pgid, start in groups.items():
        leader_start = procfs.start_ticks(pgid)
        if leader_start is None or leader_start == start:
            _kill_group(pgid)
    me = os.getpid()
    for _ in range(KILL_ROUNDS):
        found = procfs.marked(mark, exclude=me)
        if not found:
            break
        for pid in found:
            if procfs.pgid(pid) == pid:
                _kill_group(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(KILL_PAUSE_S)
    for argvs in commands.values():
        for argv in argvs:
            try:
                subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=COMMAND_TIMEOUT_S,
                )
            except (OSError, subprocess.SubprocessError):
                pass


def watch(mark: bytes, stream) -> None:
    """Read messages until EOF, then end everything still recorded."""
    groups: dict[int, int] = {}
    commands: dict[str, list] = {}
    for line in stream:
        verb, _, rest = line.decode(errors="replace").strip().partition(" ")
        try:
            if verb == "group":
                pgid, start = rest.split()
                groups[int(pgid)] = int(start)
            elif verb == "ungroup":
                groups.pop(int(rest), None)
            elif verb == "atdeath":
                key, _, argvs = rest.partition(" ")
                commands[key] = json.loads(argvs)
            elif verb == "forget":
                commands.pop(rest, None)
        except ValueError:
            continue  # a torn line from a dying perfctl: nothing to act on
    end_everything(mark, groups, commands)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m orchestrator.proc.guardian PERFCTL_SUPERVISOR_VALUE", file=sys.stderr
        )
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's Ctrl-C or hang-up is perfctl's
        signal.signal(sig, signal.SIG_IGN)  # to handle; the guardian waits for EOF
    watch(f"PERFCTL_SUPERVISOR={argv[0]}".encode(), sys.stdin.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
