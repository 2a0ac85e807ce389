"""Every server gets a temporary directory of its own (TMPDIR, and java.io.tmpdir for the
bundled JVMs), removed when the server stops, and by the guardian on kill -9: Tomcat and Spring
Boot used to leave a work directory in /tmp per start (789 in one day of tests)."""

from __future__ import annotations

import signal

import pytest
from fault_kit import poll_until

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]

SERVLET = """
name: tmpdir-servlet
servers: {servlet: {impl: java, model: servlet, threads: 8}}
workload: {path: /work}
load: {mode: closed, connections: 2, duration: 30s, warmup: 100ms}
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""

PY = """
name: tmpdir-py
servers: {py: {impl: python, model: async}}
workload: {path: /work}
load: {mode: closed, connections: 2, duration: 3s, warmup: 100ms}
repeats: 2
placement: {server_cpus: [0], loadgen_cpus: [1]}
"""


def _private_tmp(tmp_path, perfctl_env):
    tmp = tmp_path / "tmp"  # tempfile's TMPDIR for perfctl: this test's alone
    tmp.mkdir()
    perfctl_env["TMPDIR"] = str(tmp)
    return tmp


def test_tomcat_works_in_the_servers_own_tmpdir_and_kill9_removes_it(
    tmp_path, write_yaml, start_perfctl, perfctl_env
):
    tmp = _private_tmp(tmp_path, perfctl_env)
    proc = start_perfctl("run", str(write_yaml(SERVLET)), "--out", str(tmp_path / "run"))
    tomcat = poll_until(lambda: list(tmp.glob("perfctl-server-tmp-*/perfctl-tomcat*")), 120)
    assert tomcat, f"Tomcat's base never showed up in the server's TMPDIR: exit {proc.poll()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert poll_until(lambda: not any(d.exists() for d in tomcat), 15), f"left: {tomcat}"


def test_the_servers_tmpdir_is_removed_after_each_trial(
    tmp_path, write_yaml, start_perfctl, perfctl_env
):
    tmp = _private_tmp(tmp_path, perfctl_env)
    proc = start_perfctl("run", str(write_yaml(PY)), "--out", str(tmp_path / "run"), "--no-plots")
    seen = poll_until(lambda: list(tmp.glob("perfctl-server-tmp-*")), 60)
    assert seen, f"no server TMPDIR while the trial ran: exit {proc.poll()}"
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert not list(tmp.iterdir()), f"left in TMPDIR after the run: {list(tmp.iterdir())}"
