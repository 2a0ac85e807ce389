"""End to end: `perfctl run` with `tls: true` servers (the bundled Python and C servers, a tiny
`cmd` server given {cert} and {key}, another reading PERFCTL_TLS_CERT and PERFCTL_TLS_KEY):
every request over HTTPS with the handshake in the rows; the trial's keys gone after the run; a server that ignores its certificate, or `tls: true` on
a bundled model without TLS (C epoll), is exit 2 and one paragraph."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

EXP = f"""
name: tls-e2e
servers:
  py: {{impl: python, model: async, tls: true}}
  c: {{impl: c, model: pool, threads: 2, tls: true}}
  tiny:
    cmd: "{sys.executable} {HERE / "tls_cmd_server.py"} {{port}} {{cert}} {{key}}"
    tls: true
    threads: 1
    dispatch: per_connection
    ready: {{http: /}}
  tiny_env:
    cmd: "{sys.executable} {HERE / "tls_cmd_server.py"} {{port}} - -"
    tls: true
    threads: 1
    dispatch: per_connection
workload: {{path: /work}}
load: {{mode: closed, connections: 2, duration: 500ms, warmup: 100ms, keepalive: false}}
placement: {{server_cpus: [0], loadgen_cpus: [1]}}
"""


def perfctl(args, env):
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_tls_servers_are_loaded_over_https_and_their_keys_removed(
    write_yaml, perfctl_env, tmp_path
):
    out = tmp_path / "run"
    proc = perfctl(["run", str(write_yaml(EXP)), "--out", str(out)], perfctl_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) == 4 and (trials["errors"] == 0).all() and (trials["requests"] > 0).all()
    for tdir in out.glob("cells/*/trial-1"):
        rows = pd.read_parquet(tdir / "requests.parquet", columns=["tls_handshake_ms"])
        assert rows["tls_handshake_ms"].notna().all()  # keepalive false: a handshake each
        assert (rows["tls_handshake_ms"] > 0).all()
        spec = (tdir / "spec.json").read_text()
        assert '"tls": true' in spec
        ca = [p for p in spec.split('"') if p.endswith("ca.pem")]
        assert ca and not Path(ca[0]).parent.exists(), ca  # the trial's keys are gone


def test_a_server_that_ignores_its_certificate_is_exit_2(
    write_yaml, perfctl_env, tmp_path, assert_clean_error
):
    exp = (
        EXP.replace("{cert} {key}", "- - --plain")
        .replace("  py: {impl: python, model: async, tls: true}\n", "")
        .replace("  c: {impl: c, model: pool, threads: 2, tls: true}\n", "")
    )
    exp = exp[: exp.index("  tiny_env:")] + exp[exp.index("workload:") :]
    proc = perfctl(["run", str(write_yaml(exp)), "--out", str(tmp_path / "r")], perfctl_env)
    assert_clean_error(proc, "servers.tiny.tls", "does not speak TLS")


def test_tls_on_the_c_epoll_model_is_exit_2_naming_the_servers_that_have_it(
    write_yaml, perfctl_env, assert_clean_error
):
    exp = EXP.replace("impl: python, model: async", "impl: c, model: epoll")
    proc = perfctl(["plan", str(write_yaml(exp))], perfctl_env)
    assert_clean_error(proc, "servers.py", "tls", "python (async, pool)", "c (single", "cmd")
