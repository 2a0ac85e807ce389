"""A trial's HTTPS certificate and key (made per trial for a `tls: true` server) do not
outlive perfctl, even on kill -9: the guardian removes their directory."""

from __future__ import annotations

import signal

import pytest
from fault_kit import poll_until

# not untimed (tests/conftest.py): a perfctl started beside it would reap what a crashed one left,
# and could hide a guardian that failed to
pytestmark = pytest.mark.usefixtures("live")

EXP = """
name: tls-kill9
servers: {py: {impl: python, model: async, tls: true}}
workload: {path: /work}
load: {mode: closed, connections: 2, duration: 20s, warmup: 100ms}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


def test_the_trials_key_is_removed_when_perfctl_is_killed(
    tmp_path, write_yaml, start_perfctl, perfctl_env
):
    tmp = tmp_path / "tmp"  # the certificates' parent (tempfile's TMPDIR), this test's alone
    tmp.mkdir()
    perfctl_env["TMPDIR"] = str(tmp)
    out = tmp_path / "run"
    proc = start_perfctl("run", str(write_yaml(EXP)), "--out", str(out), "--no-plots")
    keys = poll_until(
        lambda: (
            list(tmp.glob("perfctl-tls-*/key.pem"))
            if list(out.glob("cells/*/trial-1/spec.json"))
            else None
        ),
        90,
    )
    assert keys, f"no trial with its key got under way: {proc.poll()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert poll_until(lambda: not any(k.exists() for k in keys), 15), f"left after kill -9: {keys}"
