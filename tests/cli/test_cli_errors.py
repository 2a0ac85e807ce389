"""Bad input at the command line: one paragraph naming file, key and fix; exit 2; no traceback."""

import socket
from pathlib import Path

import pytest
from cli_kit import perfctl

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
name: t
servers:
  s: {cmd: "CMD"}
load: {mode: closed, connections: 1, duration: 1s, warmup: 0s}
"""


def test_unknown_key(write_yaml, perfctl_env, assert_clean_error):
    p = write_yaml(GOOD.replace("CMD", "sleep {port}") + "lod: {}\n")
    assert_clean_error(perfctl("run", str(p), env=perfctl_env), str(p), "`lod`", "unknown key")


def test_bad_unit_in_plan(write_yaml, perfctl_env, assert_clean_error):
    p = write_yaml(
        GOOD.replace("CMD", "sleep {port}").replace("duration: 1s", "duration: 1 fortnight")
    )
    assert_clean_error(perfctl("plan", str(p), env=perfctl_env), "`load.duration`", "Fix:")


def test_bad_records_in_plan(write_yaml, perfctl_env, assert_clean_error):
    p = write_yaml(
        GOOD.replace("CMD", "sleep {port}").replace("warmup: 0s}", "warmup: 0s, records: some}")
    )
    assert_clean_error(
        perfctl("plan", str(p), env=perfctl_env), "`load.records`", "sample:FRACTION", "Fix:"
    )


@pytest.mark.usefixtures("live")
def test_server_that_dies_during_startup(write_yaml, perfctl_env, tmp_path, assert_clean_error):
    p = write_yaml(GOOD.replace("CMD", "sh -c 'echo boom-on-stderr >&2; exit 3' {port}"))
    proc = perfctl("run", str(p), "--out", str(tmp_path / "out"), env=perfctl_env)
    assert_clean_error(proc, "exited with status 3 during start-up", "boom-on-stderr", "servers.s")


@pytest.mark.usefixtures("live")
def test_taken_port(write_yaml, perfctl_env, tmp_path, assert_clean_error):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = write_yaml(GOOD.replace('{cmd: "CMD"}', f'{{cmd: "sleep {{port}}", port: {port}}}'))
        proc = perfctl("run", str(p), "--out", str(tmp_path / "out"), env=perfctl_env)
    assert_clean_error(proc, f"port {port} is already taken", "servers.s.port")


def test_results_dir_not_writable(write_yaml, perfctl_env, tmp_path, assert_clean_error):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    p = write_yaml(GOOD.replace("CMD", "sleep {port}"))
    proc = perfctl("run", str(p), "--out", str(blocker / "sub"), env=perfctl_env)
    assert_clean_error(proc, "not writable", "--out")


def test_version_and_help(perfctl_env):
    v = perfctl("--version", env=perfctl_env)
    assert v.returncode == 0 and "perfctl 0." in v.stdout
    for cmd in ("run", "plan", "serve"):
        h = perfctl(cmd, "--help", env=perfctl_env)
        assert h.returncode == 0 and "Usage" in h.stdout


@pytest.mark.parametrize("args", [["serve", "cobol"], ["serve", "python", "--model", "fork"]])
def test_serve_bad_impl_or_model(args, perfctl_env, assert_clean_error):
    assert_clean_error(
        perfctl(*args, env=perfctl_env),
        "choose one of" if "--model" in args else "unknown server impl",
    )
