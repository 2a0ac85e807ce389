"""A local cluster's hosts: network namespaces h1..hN, each joined by a veth pair to one
bridge in the root namespace, so traffic between hosts takes a real network path.

Names: the bridge is `pcbr<pid>` (pid of the perfctl that made it; cleanup_stale_bridges()
removes those whose perfctl is gone), the namespaces `perfctl-<pid>-<n>` (netem's pattern, so
netem.namespace.cleanup_stale() removes them), veth ends `pc<hex6>b<i>` (bridge side) and
`pc<hex6>h<i>` (host side). Addresses: one free /24 of 10.214.0.0/16; the bridge is .1, host
hi is .(10+i). Before anything is made, the guardian learns the teardown commands, so a
perfctl killed with -9 leaves no namespace, bridge or veth behind.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
from dataclasses import dataclass, field

from ..errors import PerfctlError
from ..netem import namespace
from ..proc import process, procfs

BRIDGE_PREFIX = "pcbr"
SUBNET = ipaddress.ip_network("10.214.0.0/16")
PREFIX_LEN = 24


def bridge_setup_commands(bridge: str, bridge_ip: str) -> list[list[str]]:
    return [
        ["ip", "link", "add", bridge, "type", "bridge"],
        ["ip", "addr", "add", f"{bridge_ip}/{PREFIX_LEN}", "dev", bridge],
        ["ip", "link", "set", bridge, "up"],
    ]


def host_setup_commands(
    netns: str, bridge: str, bridge_if: str, host_if: str, ip: str
) -> list[list[str]]:
    """Namespace `netns` with address ip on veth host_if, whose peer bridge_if is a port of
    `bridge`."""
    return [
        ["ip", "netns", "add", netns],
        ["ip", "link", "add", bridge_if, "type", "veth", "peer", "name", host_if, "netns", netns],
        ["ip", "link", "set", bridge_if, "master", bridge],
        ["ip", "link", "set", bridge_if, "up"],
        ["ip", "-n", netns, "addr", "add", f"{ip}/{PREFIX_LEN}", "dev", host_if],
        ["ip", "-n", netns, "link", "set", host_if, "up"],
        ["ip", "-n", netns, "link", "set", "lo", "up"],
    ]


def teardown_commands(bridge: str, netns: list[str], bridge_ifs: list[str]) -> list[list[str]]:
    """Remove every namespace (which destroys its veth pair), any veth end left over, and the
    bridge. Each may fail harmlessly when already gone."""
    return (
        [["ip", "netns", "del", n] for n in netns]
        + [["ip", "link", "del", i] for i in bridge_ifs]
        + [["ip", "link", "del", bridge]]
    )


@dataclass
class Host:
    name: str  # h1, h2, ...: the Dask worker's name
    netns: str
    ip: str


@dataclass
class LocalHosts:
    """create() then delete(); delete() is idempotent."""

    bridge: str
    bridge_ip: str
    hosts: list[Host] = field(default_factory=list)
    bridge_ifs: list[str] = field(default_factory=list)
    alive: bool = False

    @property
    def guardian_key(self) -> str:
        return f"cluster:{self.bridge}"

    @classmethod
    def create(cls, names: list[str]) -> LocalHosts:
        if os.geteuid() != 0:
            raise PerfctlError(
                "cluster.local: a local cluster's hosts are network namespaces, "
                "which need root (CAP_NET_ADMIN). Fix: run perfctl as root, or "
                "use `cluster: {scheduler: tcp://HOST:8786}` with workers you "
                "started (docs/clusters.md)."
            )
        net = _free_subnet()
        token = secrets.token_hex(3)
        self = cls(bridge=f"{BRIDGE_PREFIX}{os.getpid()}", bridge_ip=str(net[1]))
        if self.bridge in _bridges():
            raise PerfctlError(
                f"bridge {self.bridge} exists already: this perfctl process "
                "runs one local cluster at a time"
            )
        for i, name in enumerate(names, start=1):
            self.hosts.append(Host(name, namespace.next_name(), str(net[10 + i])))
            self.bridge_ifs.append(f"pc{token}b{i}")
        self.alive = True
        process.at_death(self.guardian_key, self._teardown())
        try:
            for cmd in bridge_setup_commands(self.bridge, self.bridge_ip):
                namespace.run(cmd)
            for i, h in enumerate(self.hosts, start=1):
                for cmd in host_setup_commands(
                    h.netns, self.bridge, self.bridge_ifs[i - 1], f"pc{token}h{i}", h.ip
                ):
                    namespace.run(cmd)
        except BaseException:
            self.delete()
            raise
        return self

    def _teardown(self) -> list[list[str]]:
        return teardown_commands(self.bridge, [h.netns for h in self.hosts], self.bridge_ifs)

    def delete(self) -> None:
        if not self.alive:
            return
        self.alive = False
        present = set(namespace.list_netns())
        for h in self.hosts:
            if h.netns in present:
                namespace.Netns(h.netns, "", "", "", "", alive=True).kill_processes()
        for cmd in self._teardown():
            namespace.run(cmd, check=False)
        process.forget(self.guardian_key)


def _bridges() -> list[str]:
    proc = namespace.run(["ip", "-o", "link", "show", "type", "bridge"], check=False)
    return re.findall(r"^\d+:\s+([^:@\s]+)", proc.stdout, flags=re.M)


def _free_subnet() -> ipaddress.IPv4Network:
    used = {ipaddress.ip_address(a) for a in namespace.used_addresses()}
    blocks = list(SUBNET.subnets(new_prefix=PREFIX_LEN))
    start = os.getpid() % len(blocks)
    for k in range(len(blocks)):
        net = blocks[(start + k) % len(blocks)]
        if not any(a in net for a in used):
            return net
    raise PerfctlError(
        "no free /24 in 10.214.0.0/16 for a local cluster; remove stale "
        f"bridges ({BRIDGE_PREFIX}...) with `ip link del`"
    )


def cleanup_stale_bridges() -> list[str]:
    """Delete pcbr<pid> bridges whose perfctl is gone (the namespaces go with netem's
    cleanup_stale()). Returns their names."""
    removed = []
    for name in _bridges():
        m = re.fullmatch(rf"{BRIDGE_PREFIX}(\d+)", name)
        if m and not procfs.alive(int(m.group(1))):
            namespace.run(["ip", "link", "del", name], check=False)
            removed.append(name)
    return removed
