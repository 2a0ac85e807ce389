"""Network namespaces joined to the host by a veth pair, and qdisc availability checks.

Every namespace this module creates is named `perfctl-<pid>-<n>` so that one left behind by a
killed run can be found and removed (`cleanup_stale()`); its veth ends are `pc<hex6>h` (host)
and `pc<hex6>n` (namespace), addresses from 10.213.0.0/16 in /30 blocks.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from functools import cache

from ..errors import PerfctlError
from ..proc import process, procfs
from .commands import netns_setup_commands, netns_teardown_commands, qdisc_probe_command

NS_PREFIX = "perfctl-"
SUBNET = ipaddress.ip_network("10.213.0.0/16")
_counter = itertools.count()


def run(cmd: list[str], check: bool = True, timeout: float = 15.0) -> subprocess.CompletedProcess:
    """Run one ip/tc command; raise PerfctlError with its stderr when check and it fails."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise PerfctlError(
            f"`{cmd[0]}` is not installed; install iproute2 (apt-get install iproute2)"
        ) from None
    if check and proc.returncode != 0:
        raise PerfctlError(
            f"`{' '.join(cmd)}` failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()}"
        )
    return proc


def list_netns() -> list[str]:
    """Names from `ip netns list`."""
    proc = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def next_name() -> str:
    """A fresh `perfctl-<pid>-<n>` namespace name (cleanup_stale() knows the pattern)."""
    return f"{NS_PREFIX}{os.getpid()}-{next(_counter)}"


def used_addresses() -> set[str]:
    proc = run(["ip", "-4", "-o", "addr", "show"], check=False)
    return set(re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", proc.stdout))


def _pick_subnet() -> tuple[str, str]:
    used = used_addresses()
    n_blocks = SUBNET.num_addresses // 4
    start = (os.getpid() * 131 + next(_counter) * 7) % n_blocks
    for k in range(256):
        base = int(SUBNET.network_address) + ((start + k) % n_blocks) * 4
        host_ip, ns_ip = str(ipaddress.ip_address(base + 1)), str(ipaddress.ip_address(base + 2))
        if host_ip not in used and ns_ip not in used:
            return host_ip, ns_ip
    raise PerfctlError(
        "no free /30 in 10.213.0.0/16 for a network namespace; remove stale "
        "ones with `ip netns list` / `ip netns del perfctl-...`"
    )


@dataclass
class Netns:
    """One namespace + veth pair. create() then delete(); delete() is idempotent."""

    name: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str
    alive: bool = False

    @classmethod
    def create(cls) -> Netns:
        require_root("network namespaces")
        token = secrets.token_hex(3)
        host_ip, ns_ip = _pick_subnet()
        ns = cls(
            name=next_name(),
            host_if=f"pc{token}h",
            ns_if=f"pc{token}n",
            host_ip=host_ip,
            ns_ip=ns_ip,
        )
        ns.alive = True
        process.at_death(ns.guardian_key, netns_teardown_commands(ns.name, ns.host_if))
        try:
            for cmd in netns_setup_commands(ns.name, ns.host_if, ns.ns_if, host_ip, ns_ip):
                run(cmd)
        except BaseException:
            ns.delete()
            raise
        return ns

    @property
    def guardian_key(self) -> str:
        """Under this key the guardian holds the teardown commands, run if perfctl dies."""
        return f"netns:{self.name}"

    def pids(self) -> list[int]:
        proc = run(["ip", "netns", "pids", self.name], check=False)
        return [int(x) for x in proc.stdout.split() if x.isdigit()]

    def kill_processes(self, grace_s: float = 2.0) -> None:
        """SIGTERM every process still inside the namespace, SIGKILL after grace_s."""
        pids = self.pids()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                pids = [p for p in pids if procfs.alive(p)]
                if not pids:
                    return
                time.sleep(0.02)

    def delete(self) -> None:
        if not self.alive:
            return
        self.alive = False
        if self.name in list_netns():
            self.kill_processes()
        # `ip netns del` can fail while the last processes inside are still exiting: check
        # that the namespace is gone and try again a few times (bounded) before giving up.
        for attempt in range(5):
            for cmd in netns_teardown_commands(self.name, self.host_if):
                run(cmd, check=False)
            if self.name not in list_netns():
                break
            time.sleep(0.1 * (attempt + 1))
        process.forget(self.guardian_key)


def cleanup_stale() -> list[str]:
    """Delete perfctl-<pid>-<n> namespaces whose creating process is gone. Returns their names."""
    removed = []
    for name in list_netns():
        m = re.fullmatch(rf"{NS_PREFIX}(\d+)-\d+", name)
        if m and not procfs.alive(int(m.group(1))):
            Netns(name, "", "", "", "", alive=True).kill_processes()
            run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    return removed


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise PerfctlError(f"{what} need root (CAP_NET_ADMIN); run as root or use backend: proxy")


@cache
def qdisc_status(kind: str) -> tuple[bool, str]:
    """(works, reason) for qdisc `kind` ('netem' or 'tbf'), by a dry `tc qdisc add` on the
    loopback of a throwaway namespace. Cached for the life of the process."""
    if os.geteuid() != 0:
        return False, "not root: tc and network namespaces need CAP_NET_ADMIN"
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            return False, f"`{tool}` not found (apt-get install iproute2)"
    name = next_name()
    add = run(["ip", "netns", "add", name], check=False)
    if add.returncode != 0:
        return False, f"cannot create a network namespace: {add.stderr.strip()}"
    try:
        proc = run(qdisc_probe_command(name, kind), check=False)
    finally:
        run(["ip", "netns", "del", name], check=False)
    if proc.returncode == 0:
        return True, f"`tc qdisc add ... {kind}` works"
    err = (proc.stderr or proc.stdout).strip().replace("\n", " ")
    reason = f"`tc qdisc add ... {kind}` failed: {err}"
    if "unknown" in err.lower():
        mod = f"sch_{kind}"
        release = os.uname().release
        have_mod = any(
            os.path.exists(p)
            for p in (
                f"/lib/modules/{release}/kernel/net/sched/{mod}.ko",
                f"/lib/modules/{release}/kernel/net/sched/{mod}.ko.xz",
                f"/lib/modules/{release}/kernel/net/sched/{mod}.ko.zst",
            )
        )
        reason = f"the kernel ({release}) has no {mod} qdisc" + (
            f" loaded (try `modprobe {mod}`)"
            if have_mod
            else f" (not built in, and no {mod} module under /lib/modules/{release})"
        )
    return False, reason
