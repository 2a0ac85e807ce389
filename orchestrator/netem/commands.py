"""Pure functions that build the ip / tc / perfctl-proxy command lines (unit-tested as text).

Nothing here runs a command. Direction convention everywhere: "up" is client -> server and is
shaped on the egress of the host-side veth; "down" is server -> client and is shaped on the
egress of the namespace-side veth.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..experiment.network import Network, ms_arg, rate_arg

Cmd = list[str]


def netns_exec(ns: str, argv: list[str]) -> Cmd:
    """Prefix argv so it runs inside network namespace `ns`."""
    return ["ip", "netns", "exec", ns, *argv]


def netns_setup_commands(ns: str, host_if: str, ns_if: str, host_ip: str, ns_ip: str,
                         prefix: int = 30) -> list[Cmd]:
    """Create namespace `ns` joined to the host by a veth pair host_if <-> ns_if."""
    return [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", ns],
        ["ip", "addr", "add", f"{host_ip}/{prefix}", "dev", host_if],
        ["ip", "link", "set", host_if, "up"],
        ["ip", "-n", ns, "addr", "add", f"{ns_ip}/{prefix}", "dev", ns_if],
        ["ip", "-n", ns, "link", "set", ns_if, "up"],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
    ]


def netns_teardown_commands(ns: str, host_if: str) -> list[Cmd]:
    """Remove the namespace (which destroys its veth end and so the pair) and, in case the
    namespace was already gone, the host end. Each may fail harmlessly when already removed."""
    return [["ip", "netns", "del", ns], ["ip", "link", "del", host_if]]


def netem_args(delay_ms: float, jitter_ms: float = 0.0, distribution: str = "uniform",
               loss: float = 0.0, bandwidth_bps: float | None = None,
               limit: int | None = None) -> list[str]:
    """Arguments after `netem` for one direction, e.g.
    ['limit', '100000', 'delay', '10ms', '2ms', 'distribution', 'normal', 'loss', 'random', '1%']."""
    args: list[str] = []
    if limit is None:
        limit = netem_limit(delay_ms + 3 * jitter_ms, bandwidth_bps)
    args += ["limit", str(limit)]
    args += ["delay", ms_arg(delay_ms)]
    if jitter_ms:
        args.append(ms_arg(jitter_ms))
        if distribution != "uniform":   # netem's default with a jitter is uniform
            args += ["distribution", distribution]
    if loss:
        args += ["loss", "random", f"{loss * 100:g}%"]
    if bandwidth_bps:
        args += ["rate", rate_arg(bandwidth_bps)]
    return args


def netem_limit(delay_ms: float, bandwidth_bps: float | None, mtu: int = 1500) -> int:
    """Queue length in packets: twice the bandwidth-delay product (10 Gbit/s if unlimited),
    at least netem's default of 1000."""
    rate = bandwidth_bps or 10e9
    bdp_pkts = rate * max(delay_ms, 1.0) / 1e3 / 8 / mtu
    return max(1000, int(math.ceil(2 * bdp_pkts)))


def netem_qdisc_commands(spec: Network, ns: str, host_if: str, ns_if: str) -> list[Cmd]:
    """`tc qdisc add ... root netem ...` on both veth ends (up on the host end, down in ns)."""
    up, down = spec.direction_delays_ms()
    return [
        ["tc", "qdisc", "add", "dev", host_if, "root", "netem",
         *netem_args(up, spec.jitter_ms, spec.distribution, spec.loss, spec.bandwidth_bps)],
        ["tc", "-n", ns, "qdisc", "add", "dev", ns_if, "root", "netem",
         *netem_args(down, spec.jitter_ms, spec.distribution, spec.loss, spec.bandwidth_bps)],
    ]


def tbf_burst_bytes(bandwidth_bps: float) -> int:
    """Bucket size: 5 ms of traffic, at least 4 KiB (> one MTU-sized frame). Measured on veth
    with TCP bulk transfers: 2 ms sometimes collapses to ~2/3 of the rate, 20 ms overshoots it;
    5 ms gives a steady ~96.5 % goodput (the rest is TCP/IP headers, which tbf counts)."""
    return max(4096, int(bandwidth_bps / 8 * 0.005))


def tbf_args(bandwidth_bps: float, latency_ms: float = 50.0, burst: int | None = None) -> list[str]:
    """Arguments after `tbf`, e.g. ['rate', '10000000bit', 'burst', '4096', 'latency', '50ms']."""
    burst = tbf_burst_bytes(bandwidth_bps) if burst is None else burst
    return ["rate", rate_arg(bandwidth_bps), "burst", str(burst), "latency", ms_arg(latency_ms)]


def tbf_qdisc_commands(spec: Network, ns: str, host_if: str, ns_if: str) -> list[Cmd]:
    """`tc qdisc add ... root tbf ...` on both veth ends: the bandwidth limit in each direction."""
    assert spec.bandwidth_bps, "tbf needs a bandwidth"
    return [
        ["tc", "qdisc", "add", "dev", host_if, "root", "tbf", *tbf_args(spec.bandwidth_bps)],
        ["tc", "-n", ns, "qdisc", "add", "dev", ns_if, "root", "tbf", *tbf_args(spec.bandwidth_bps)],
    ]


def qdisc_probe_command(ns: str, kind: str) -> Cmd:
    """A dry `tc qdisc add` on the loopback of a throwaway namespace: succeeds iff the kernel
    has the qdisc."""
    args = {"netem": ["netem", "delay", "1ms"],
            "tbf": ["tbf", *tbf_args(1e6)]}[kind]
    return ["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", *args]


def proxy_argv(binary: str | Path, spec: Network, listen: str, to: str,
               echo_listen: str | None = None, seed: int | None = None,
               queue_limit: int | None = None) -> Cmd:
    """The perfctl-proxy command line for `spec`."""
    up, down = spec.direction_delays_ms()
    argv = [str(binary), "--listen", listen, "--to", to]
    if echo_listen:
        argv += ["--echo-listen", echo_listen]
    if up:
        argv += ["--delay-up", ms_arg(up)]
    if down:
        argv += ["--delay-down", ms_arg(down)]
    if spec.jitter_ms:
        argv += ["--jitter", ms_arg(spec.jitter_ms), "--distribution", spec.distribution]
    if spec.loss:
        argv += ["--loss", f"{spec.loss:.9g}", "--rto", ms_arg(spec.rto_ms)]
    if spec.bandwidth_bps:
        argv += ["--bandwidth", rate_arg(spec.bandwidth_bps)]
    if queue_limit:
        argv += ["--queue-limit", str(int(queue_limit))]
    if seed is not None:
        argv += ["--seed", str(int(seed))]
    return argv
