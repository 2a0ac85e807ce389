"""Pure functions that build the ip / tc / perfctl-proxy command lines (unit-tested as text),
and the way those tools spell a duration, a rate and a probability (ms_arg, rate_arg, pct_arg).

Nothing here runs a command. Direction convention everywhere: "up" is client -> server and is
shaped on the egress of the host-side veth; "down" is server -> client and is shaped on the
egress of the namespace-side veth.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..experiment.network import GilbertElliott, Network

Cmd = list[str]


def ms_arg(ms: float) -> str:
    """A duration as the proxy and tc accept it, exact to the microsecond: '10ms', '250us'."""
    us = round(ms * 1000.0)
    if us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


def rate_arg(bps: float) -> str:
    """A bandwidth as the proxy and tc accept it (integer bits/s): '10000000bit'."""
    return f"{int(round(bps))}bit"


def pct_arg(p: float) -> str:
    """A probability as tc writes it: 0.0125 -> '1.25%'."""
    return f"{p * 100:.6g}%"


def netns_exec(ns: str, argv: list[str]) -> Cmd:
    """Prefix argv so it runs inside network namespace `ns`."""
    return ["ip", "netns", "exec", ns, *argv]


def netns_setup_commands(
    ns: str, host_if: str, ns_if: str, host_ip: str, ns_ip: str, prefix: int = 30
) -> list[Cmd]:
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


def netem_args(
    delay_ms: float,
    jitter_ms: float = 0.0,
    distribution: str = "uniform",
    loss: float = 0.0,
    bandwidth_bps: float | None = None,
    limit: int | None = None,
    jitter_correlation: float = 0.0,
    loss_burst: GilbertElliott | None = None,
    reorder: float = 0.0,
    reorder_correlation: float = 0.0,
) -> list[str]:
    """Arguments after `netem` for one direction, e.g.
    ['limit', '100000', 'delay', '10ms', '2ms', '25%', 'distribution', 'normal',
     'loss', 'gemodel', '1%', '25%', '100%', '0%', 'reorder', '5%', 'rate', '10000000bit'].
    tc-netem(8): delay TIME [JITTER [CORRELATION]] [distribution D]; loss random P |
    loss gemodel p [r [1-h [1-k]]]; reorder P [CORRELATION] (needs a delay)."""
    args: list[str] = []
    if limit is None:
        limit = netem_limit(delay_ms + 3 * jitter_ms, bandwidth_bps)
    args += ["limit", str(limit)]
    args += ["delay", ms_arg(delay_ms)]
    if jitter_ms:
        args.append(ms_arg(jitter_ms))
        if jitter_correlation:
            args.append(pct_arg(jitter_correlation))
        if distribution != "uniform":  # netem's default with a jitter is uniform
            args += ["distribution", distribution]
    if loss_burst is not None:
        args += [
            "loss",
            "gemodel",
            *(
                pct_arg(x)
                for x in (loss_burst.p, loss_burst.r, loss_burst.loss_bad, loss_burst.loss_good)
            ),
        ]
    elif loss:
        args += ["loss", "random", pct_arg(loss)]
    if reorder:
        args += ["reorder", pct_arg(reorder)]
        if reorder_correlation:
            args.append(pct_arg(reorder_correlation))
    if bandwidth_bps:
        args += ["rate", rate_arg(bandwidth_bps)]
    return args


def netem_direction_args(spec: Network, direction: int) -> list[str]:
    """netem_args for direction 0 (up, host veth) or 1 (down, namespace veth) of spec."""
    return netem_args(
        spec.direction_delays_ms()[direction],
        spec.jitter_ms,
        spec.distribution,
        spec.loss,
        spec.direction_bandwidths_bps()[direction],
        jitter_correlation=spec.jitter_correlation,
        loss_burst=spec.loss_burst,
        reorder=spec.reorder,
        reorder_correlation=spec.reorder_correlation,
    )


def netem_limit(delay_ms: float, bandwidth_bps: float | None, mtu: int = 1500) -> int:
    """Queue length in packets: twice the bandwidth-delay product (10 Gbit/s if unlimited),
    at least netem's default of 1000."""
    rate = bandwidth_bps or 10e9
    bdp_pkts = rate * max(delay_ms, 1.0) / 1e3 / 8 / mtu
    return max(1000, int(math.ceil(2 * bdp_pkts)))


def netem_qdisc_commands(spec: Network, ns: str, host_if: str, ns_if: str) -> list[Cmd]:
    """`tc qdisc add ... root netem ...` on both veth ends (up on the host end, down in ns)."""
    return netem_qdisc_verb_commands("add", spec, ns, host_if, ns_if)


def netem_qdisc_verb_commands(
    verb: str, spec: Network, ns: str, host_if: str, ns_if: str
) -> list[Cmd]:
    """`tc qdisc VERB ... root netem ...` on both veth ends; VERB add at set-up, change for a
    schedule step (netem replaces every parameter of the qdisc on change)."""
    return [
        ["tc", "qdisc", verb, "dev", host_if, "root", "netem", *netem_direction_args(spec, 0)],
        [
            "tc",
            "-n",
            ns,
            "qdisc",
            verb,
            "dev",
            ns_if,
            "root",
            "netem",
            *netem_direction_args(spec, 1),
        ],
    ]


def netem_schedule_commands(
    spec: Network, ns: str, host_if: str, ns_if: str
) -> list[tuple[float, list[Cmd]]]:
    """[(at_s, commands)] that apply each schedule step of spec with `tc qdisc change`."""
    return [
        (step.at_s, netem_qdisc_verb_commands("change", step.state, ns, host_if, ns_if))
        for step in spec.schedule
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
    up, down = spec.direction_bandwidths_bps()
    assert up and down, "tbf needs a bandwidth each way"
    return [
        ["tc", "qdisc", "add", "dev", host_if, "root", "tbf", *tbf_args(up)],
        ["tc", "-n", ns, "qdisc", "add", "dev", ns_if, "root", "tbf", *tbf_args(down)],
    ]


def qdisc_probe_command(ns: str, kind: str) -> Cmd:
    """A dry `tc qdisc add` on the loopback of a throwaway namespace: succeeds iff the kernel
    has the qdisc."""
    args = {"netem": ["netem", "delay", "1ms"], "tbf": ["tbf", *tbf_args(1e6)]}[kind]
    return ["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", *args]


def proxy_shaping_args(spec: Network) -> list[str]:
    """perfctl-proxy's shaping flags for one state of the network (no schedule)."""
    up, down = spec.direction_delays_ms()
    argv: list[str] = []
    if up:
        argv += ["--delay-up", ms_arg(up)]
    if down:
        argv += ["--delay-down", ms_arg(down)]
    if spec.jitter_ms:
        argv += ["--jitter", ms_arg(spec.jitter_ms), "--distribution", spec.distribution]
        if spec.jitter_correlation:
            argv += ["--jitter-correlation", f"{spec.jitter_correlation:.9g}"]
    if spec.loss_burst is not None:
        g = spec.loss_burst
        argv += ["--gemodel", ",".join(f"{x:.9g}" for x in (g.p, g.r, g.loss_bad, g.loss_good))]
    elif spec.loss:
        argv += ["--loss", f"{spec.loss:.9g}"]
    if spec.has_loss:
        argv += ["--rto", ms_arg(spec.rto_ms)]
    if spec.reorder:
        argv += ["--reorder", f"{spec.reorder:.9g}"]
        if spec.reorder_correlation:
            argv += ["--reorder-correlation", f"{spec.reorder_correlation:.9g}"]
    if spec.reset:
        argv += ["--reset", f"{spec.reset:.9g}"]
    if spec.blackhole:
        argv += ["--blackhole", f"{spec.blackhole:.9g}"]
    bu, bd = spec.direction_bandwidths_bps()
    if bu and bu == bd:
        argv += ["--bandwidth", rate_arg(bu)]
    else:
        if bu:
            argv += ["--bandwidth-up", rate_arg(bu)]
        if bd:
            argv += ["--bandwidth-down", rate_arg(bd)]
    return argv


def proxy_step_args(spec: Network) -> list[str]:
    """One `--at T` block per schedule step. Each block first switches everything off, then
    sets the step's whole state, so a key the step drops (loss after loss_burst) is gone."""
    argv: list[str] = []
    for step in spec.schedule:
        argv += [
            "--at",
            f"{round(step.at_s * 1e6)}us",
            *_PROXY_OFF,
            *proxy_shaping_args(step.state),
        ]
    return argv


# every shaping flag at its off value (what a schedule step starts from)
_PROXY_OFF = [
    "--delay",
    "0ms",
    "--jitter",
    "0ms",
    "--jitter-correlation",
    "0",
    "--loss",
    "0",
    "--reorder",
    "0",
    "--reorder-correlation",
    "0",
    "--reset",
    "0",
    "--blackhole",
    "0",
    "--bandwidth-up",
    "0",
    "--bandwidth-down",
    "0",
]


def proxy_argv(
    binary: str | Path,
    spec: Network,
    listen: str,
    to: str,
    echo_listen: str | None = None,
    seed: int | None = None,
    queue_limit: int | None = None,
    cpus: list[int] | None = None,
    schedule_anchor: str | None = None,
) -> Cmd:
    """The perfctl-proxy command line for `spec` (its schedule as `--at` blocks; anchor
    'stdin' makes the proxy wait for "start NS" on stdin, else the schedule runs from when
    it listens). cpus: pin one worker thread per CPU."""
    argv = [str(binary), "--listen", listen, "--to", to]
    if echo_listen:
        argv += ["--echo-listen", echo_listen]
    argv += proxy_shaping_args(spec)
    if queue_limit:
        argv += ["--queue-limit", str(int(queue_limit))]
    if seed is not None:
        argv += ["--seed", str(int(seed))]
    if cpus:
        argv += ["--cpus", ",".join(str(int(c)) for c in cpus)]
    if spec.schedule:
        argv += proxy_step_args(spec)
        if schedule_anchor:
            argv += ["--schedule-anchor", schedule_anchor]
    return argv
