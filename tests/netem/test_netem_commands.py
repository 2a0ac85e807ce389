"""Command construction for ip / tc / perfctl-proxy (pure functions, no side effects)."""
from __future__ import annotations

from orchestrator.experiment.network import Network
from orchestrator.netem.commands import (netem_args, netem_limit, netem_qdisc_commands, netns_exec,
                                         netns_setup_commands, netns_teardown_commands, proxy_argv,
                                         qdisc_probe_command, tbf_args, tbf_qdisc_commands)
from orchestrator.experiment.network import ms_arg, rate_arg


def test_netem_ms_and_rate_args():
    assert ms_arg(10.0) == "10ms"
    assert ms_arg(0.25) == "250us"
    assert ms_arg(1.5) == "1500us"
    assert ms_arg(0.0) == "0ms"
    assert rate_arg(10e6) == "10000000bit"


def test_netem_netem_args():
    assert netem_args(10.0, limit=1000) == ["limit", "1000", "delay", "10ms"]
    assert netem_args(10.0, 2.0, "normal", 0.01, 10e6, limit=5000) == [
        "limit", "5000", "delay", "10ms", "2ms", "distribution", "normal",
        "loss", "random", "1%", "rate", "10000000bit"]
    # uniform is netem's default for a jitter: no distribution keyword
    assert netem_args(5.0, 1.0, "uniform", limit=1000) == ["limit", "1000", "delay", "5ms", "1ms"]
    assert netem_limit(1.0, 10e6) == 1000
    assert netem_limit(50.0, 10e9) > 80000


def test_netem_qdisc_commands_both_ends():
    spec = Network(delay_up="3ms", delay_down="7ms", jitter="1ms", distribution="pareto")
    up, down = netem_qdisc_commands(spec, "perfctl-1-0", "pcabcdefh", "pcabcdefn")
    assert up[:7] == ["tc", "qdisc", "add", "dev", "pcabcdefh", "root", "netem"]
    assert up[up.index("delay") + 1:up.index("delay") + 3] == ["3ms", "1ms"]
    assert down[:9] == ["tc", "-n", "perfctl-1-0", "qdisc", "add", "dev", "pcabcdefn", "root", "netem"]
    assert down[down.index("delay") + 1] == "7ms"
    assert "pareto" in up and "pareto" in down


def test_netem_tbf_commands():
    assert tbf_args(10e6) == ["rate", "10000000bit", "burst", "6250", "latency", "50ms"]
    assert tbf_args(1e9)[3] == str(625000)   # 5 ms of traffic
    assert tbf_args(1e6)[3] == "4096"
    spec = Network(backend="tbf", bandwidth="10mbit")
    host, ns = tbf_qdisc_commands(spec, "perfctl-1-0", "h", "n")
    assert host == ["tc", "qdisc", "add", "dev", "h", "root", "tbf", "rate", "10000000bit",
                    "burst", "6250", "latency", "50ms"]
    assert ns[:3] == ["tc", "-n", "perfctl-1-0"]


def test_netem_namespace_commands():
    cmds = netns_setup_commands("perfctl-9-1", "pc0h", "pc0n", "10.213.0.1", "10.213.0.2")
    assert cmds[0] == ["ip", "netns", "add", "perfctl-9-1"]
    assert cmds[1] == ["ip", "link", "add", "pc0h", "type", "veth", "peer", "name", "pc0n",
                       "netns", "perfctl-9-1"]
    assert ["ip", "addr", "add", "10.213.0.1/30", "dev", "pc0h"] in cmds
    assert ["ip", "-n", "perfctl-9-1", "addr", "add", "10.213.0.2/30", "dev", "pc0n"] in cmds
    assert ["ip", "-n", "perfctl-9-1", "link", "set", "lo", "up"] in cmds
    assert netns_teardown_commands("perfctl-9-1", "pc0h") == [
        ["ip", "netns", "del", "perfctl-9-1"], ["ip", "link", "del", "pc0h"]]
    assert netns_exec("ns1", ["srv", "--port", "0"]) == ["ip", "netns", "exec", "ns1", "srv", "--port", "0"]
    assert qdisc_probe_command("x", "netem") == ["tc", "-n", "x", "qdisc", "add", "dev", "lo",
                                                 "root", "netem", "delay", "1ms"]


def test_netem_proxy_argv():
    spec = Network(delay="10ms", jitter="2ms", distribution="normal", loss="1%",
                       rto="50ms", bandwidth="10mbit")
    argv = proxy_argv("/bin/p", spec, "127.0.0.1:0", "127.0.0.1:8080", echo_listen="127.0.0.1:0", seed=3)
    assert argv == ["/bin/p", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:8080",
                    "--echo-listen", "127.0.0.1:0", "--delay-up", "10ms", "--delay-down", "10ms",
                    "--jitter", "2ms", "--distribution", "normal", "--loss", "0.01", "--rto", "50ms",
                    "--bandwidth", "10000000bit", "--seed", "3"]
    assert proxy_argv("p", Network(), "a:1", "b:2") == ["p", "--listen", "a:1", "--to", "b:2"]
