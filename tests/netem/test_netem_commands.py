"""Command construction for ip / tc / perfctl-proxy (pure functions, no side effects)."""

from __future__ import annotations

from orchestrator.experiment.network import Network
from orchestrator.netem.commands import (
    ms_arg,
    netem_args,
    netem_limit,
    netem_qdisc_commands,
    netns_exec,
    netns_setup_commands,
    netns_teardown_commands,
    proxy_argv,
    qdisc_probe_command,
    rate_arg,
    tbf_args,
    tbf_qdisc_commands,
)


def test_netem_ms_and_rate_args():
    assert ms_arg(10.0) == "10ms"
    assert ms_arg(0.25) == "250us"
    assert ms_arg(1.5) == "1500us"
    assert ms_arg(0.0) == "0ms"
    assert rate_arg(10e6) == "10000000bit"


def test_netem_netem_args():
    assert netem_args(10.0, limit=1000) == ["limit", "1000", "delay", "10ms"]
    assert netem_args(10.0, 2.0, "normal", 0.01, 10e6, limit=5000) == [
        "limit",
        "5000",
        "delay",
        "10ms",
        "2ms",
        "distribution",
        "normal",
        "loss",
        "random",
        "1%",
        "rate",
        "10000000bit",
    ]
    # uniform is netem's default for a jitter: no distribution keyword
    assert netem_args(5.0, 1.0, "uniform", limit=1000) == ["limit", "1000", "delay", "5ms", "1ms"]
    assert netem_limit(1.0, 10e6) == 1000
    assert netem_limit(50.0, 10e9) > 80000


def test_netem_qdisc_commands_both_ends():
    spec = Network(delay_up="3ms", delay_down="7ms", jitter="1ms", distribution="pareto")
    up, down = netem_qdisc_commands(spec, "perfctl-1-0", "pcabcdefh", "pcabcdefn")
    assert up[:7] == ["tc", "qdisc", "add", "dev", "pcabcdefh", "root", "netem"]
    assert up[up.index("delay") + 1 : up.index("delay") + 3] == ["3ms", "1ms"]
    assert down[:9] == [
        "tc",
        "-n",
        "perfctl-1-0",
        "qdisc",
        "add",
        "dev",
        "pcabcdefn",
        "root",
        "netem",
    ]
    assert down[down.index("delay") + 1] == "7ms"
    assert "pareto" in up and "pareto" in down


def test_netem_tbf_commands():
    assert tbf_args(10e6) == ["rate", "10000000bit", "burst", "6250", "latency", "50ms"]
    assert tbf_args(1e9)[3] == str(625000)  # 5 ms of traffic
    assert tbf_args(1e6)[3] == "4096"
    spec = Network(backend="tbf", bandwidth="10mbit")
    host, ns = tbf_qdisc_commands(spec, "perfctl-1-0", "h", "n")
    assert host == [
        "tc",
        "qdisc",
        "add",
        "dev",
        "h",
        "root",
        "tbf",
        "rate",
        "10000000bit",
        "burst",
        "6250",
        "latency",
        "50ms",
    ]
    assert ns[:3] == ["tc", "-n", "perfctl-1-0"]


def test_netem_namespace_commands():
    cmds = netns_setup_commands("perfctl-9-1", "pc0h", "pc0n", "10.213.0.1", "10.213.0.2")
    assert cmds[0] == ["ip", "netns", "add", "perfctl-9-1"]
    assert cmds[1] == [
        "ip",
        "link",
        "add",
        "pc0h",
        "type",
        "veth",
        "peer",
        "name",
        "pc0n",
        "netns",
        "perfctl-9-1",
    ]
    assert ["ip", "addr", "add", "10.213.0.1/30", "dev", "pc0h"] in cmds
    assert ["ip", "-n", "perfctl-9-1", "addr", "add", "10.213.0.2/30", "dev", "pc0n"] in cmds
    assert ["ip", "-n", "perfctl-9-1", "link", "set", "lo", "up"] in cmds
    assert netns_teardown_commands("perfctl-9-1", "pc0h") == [
        ["ip", "netns", "del", "perfctl-9-1"],
        ["ip", "link", "del", "pc0h"],
    ]
    assert netns_exec("ns1", ["srv", "--port", "0"]) == [
        "ip",
        "netns",
        "exec",
        "ns1",
        "srv",
        "--port",
        "0",
    ]
    assert qdisc_probe_command("x", "netem") == [
        "tc",
        "-n",
        "x",
        "qdisc",
        "add",
        "dev",
        "lo",
        "root",
        "netem",
        "delay",
        "1ms",
    ]


def test_netem_proxy_argv():
    spec = Network(
        delay="10ms", jitter="2ms", distribution="normal", loss="1%", rto="50ms", bandwidth="10mbit"
    )
    argv = proxy_argv(
        "/bin/p", spec, "127.0.0.1:0", "127.0.0.1:8080", echo_listen="127.0.0.1:0", seed=3
    )
    assert argv == [
        "/bin/p",
        "--listen",
        "127.0.0.1:0",
        "--to",
        "127.0.0.1:8080",
        "--echo-listen",
        "127.0.0.1:0",
        "--delay-up",
        "10ms",
        "--delay-down",
        "10ms",
        "--jitter",
        "2ms",
        "--distribution",
        "normal",
        "--loss",
        "0.01",
        "--rto",
        "50ms",
        "--bandwidth",
        "10000000bit",
        "--seed",
        "3",
    ]
    assert proxy_argv("p", Network(), "a:1", "b:2") == ["p", "--listen", "a:1", "--to", "b:2"]


def test_netem_netem_args_realism():
    from orchestrator.netem.commands import netem_direction_args, netem_schedule_commands

    spec = Network.from_config(
        {
            "delay": "10ms",
            "jitter": "2ms",
            "jitter_correlation": "25%",
            "distribution": "normal",
            "reorder": "5%",
            "reorder_correlation": "50%",
            "loss_burst": {"p": "1%", "r": "25%", "loss_bad": "90%", "loss_good": "0.1%"},
            "bandwidth_up": "1mbit",
            "bandwidth_down": "2mbit",
        }
    )
    up = netem_direction_args(spec, 0)
    assert up[up.index("delay") : up.index("delay") + 6] == [
        "delay",
        "10ms",
        "2ms",
        "25%",
        "distribution",
        "normal",
    ]
    assert up[up.index("loss") : up.index("loss") + 6] == [
        "loss",
        "gemodel",
        "1%",
        "25%",
        "90%",
        "0.1%",
    ]
    assert up[up.index("reorder") : up.index("reorder") + 3] == ["reorder", "5%", "50%"]
    assert up[-2:] == ["rate", "1000000bit"] and netem_direction_args(spec, 1)[-2:] == [
        "rate",
        "2000000bit",
    ]
    sched = Network.from_config(
        {"delay": "1ms", "schedule": [{"at": "10s", "delay": "50ms"}, {"at": "20s", "loss": "5%"}]}
    )
    (t1, c1), (t2, c2) = netem_schedule_commands(sched, "ns", "h", "n")
    assert (t1, t2) == (10.0, 20.0)
    assert c1[0][:7] == ["tc", "qdisc", "change", "dev", "h", "root", "netem"]
    assert c1[1][:9] == ["tc", "-n", "ns", "qdisc", "change", "dev", "n", "root", "netem"]
    assert "50ms" in c1[0] and "loss" not in c1[0]
    assert c2[0][c2[0].index("loss") : c2[0].index("loss") + 3] == ["loss", "random", "5%"]
    assert "50ms" in c2[0]


def test_netem_proxy_argv_realism_schedule_and_cpus():
    spec = Network.from_config(
        {
            "delay": "1ms",
            "loss_burst": {"p": 0.01, "r": 0.25},
            "jitter": "1ms",
            "jitter_correlation": 0.5,
            "reset": "1%",
            "schedule": [{"at": "1500ms", "delay": "5ms", "loss": "2%"}],
        }
    )
    argv = proxy_argv(
        "perfctl-proxy", spec, "127.0.0.1:0", "127.0.0.1:80", cpus=[2, 3], schedule_anchor="stdin"
    )
    head = argv[: argv.index("--at")]
    assert head[head.index("--gemodel") + 1] == "0.01,0.25,1,0"
    assert head[head.index("--jitter-correlation") + 1] == "0.5"
    assert head[head.index("--reset") + 1] == "0.01"
    assert head[head.index("--cpus") + 1] == "2,3"
    step = argv[argv.index("--at") :]
    assert step[1] == "1500000us"
    # the step switches everything off first, then sets its whole state
    assert step.index("--loss") < step.index("--delay-up")
    assert step[step.index("--delay-up") + 1] == "5ms"
    assert step[len(step) - 1 - step[::-1].index("--loss") + 1] == "0.02"
    assert "--gemodel" not in step and argv[-2:] == ["--schedule-anchor", "stdin"]
