"""Mutual TLS on an existing cluster (a scheduler and worker h1 on loopback, started as
`perfctl cluster certs` tells a user to): a worker or a client without a certificate of the
cluster's CA cannot join or submit, a plain-TCP connection is refused, a trial runs through it;
the certificates `perfctl cluster certs` makes, and cluster.tls's files checked before use."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import distributed
import pandas as pd
import pytest
from cluster_kit import ROOT

from benchmarks._common import poll_until
from orchestrator.cluster import certs
from orchestrator.cluster.session import Session, security
from orchestrator.errors import PerfctlError
from orchestrator.experiment.cluster import Cluster

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

JOIN_TIMEOUT_S = 60
REFUSED_WORKER_DEATH_S = 3  # a worker that cannot join gives up after this (--death-timeout)
ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tls(files: certs.TlsFiles) -> list[str]:
    return ["--tls-ca-file", str(files.ca), "--tls-cert", str(files.cert)] + [
        "--tls-key",
        str(files.key),
    ]


def _worker(address: str, name: str, flags: list[str], death_s: int = 60) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", name]
        + ["--host", "127.0.0.1", "--no-nanny", "--no-dashboard", "--nthreads", "4"]
        + ["--death-timeout", str(death_s), *flags],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _kill(procs) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(10)


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """(address, the cluster's files by name, another CA's files): a TLS scheduler and worker
    h1 on 127.0.0.1, require_encryption on both."""
    tmp = tmp_path_factory.mktemp("tls")
    files = certs.write_set(tmp / "certs", ["h1", "h2"])
    rogue = certs.write_set(tmp / "rogue", ["h1", "h2"])  # valid certificates, another CA
    port = _free_port()
    address = f"tls://127.0.0.1:{port}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1"]
            + ["--port", str(port), "--protocol", "tls", "--no-dashboard"]
            + _tls(files["scheduler"]),
            cwd=ROOT,
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        ),
        _worker(address, "h1", _tls(files["h1"])),
    ]
    try:
        with distributed.Client(
            address,
            timeout=JOIN_TIMEOUT_S,
            set_as_default=False,
            security=security(files["client"]),
        ) as client:
            client.wait_for_workers(1, timeout=JOIN_TIMEOUT_S)
        yield address, files, rogue
    finally:
        _kill(procs)


def _workers(address: str, files) -> list[str]:
    with distributed.Client(
        address, timeout=JOIN_TIMEOUT_S, set_as_default=False, security=security(files["client"])
    ) as c:
        info = c.sync(c.scheduler.identity, n_workers=-1)
    return sorted(str(w.get("name")) for w in info["workers"].values())


def test_a_client_with_the_clusters_certificate_submits(tls_cluster):
    address, files, _ = tls_cluster
    with distributed.Client(
        address, timeout=JOIN_TIMEOUT_S, set_as_default=False, security=security(files["client"])
    ) as client:
        assert client.submit(sum, [1, 2, 3]).result(timeout=JOIN_TIMEOUT_S) == 6


def test_a_client_with_a_certificate_of_another_ca_cannot_submit(tls_cluster):
    """(A client with no certificate at all: Dask will not even try; the handshake test below
    shows the scheduler refusing one.)"""
    address, files, rogue = tls_cluster
    sec = security(certs.TlsFiles(files["client"].ca, rogue["client"].cert, rogue["client"].key))
    with pytest.raises((OSError, TimeoutError)):
        with distributed.Client(address, timeout=3, set_as_default=False, security=sec) as c:
            c.submit(sum, [1, 2]).result(timeout=3)  # reached only if it got in: fails the test
            pytest.fail("a client with another CA's certificate submitted a task")


def test_a_handshake_without_a_client_certificate_is_refused(tls_cluster):
    """Below Dask: a TLS client that trusts the CA but shows no certificate gets no byte of
    the scheduler's protocol (TLS 1.3 reports the refusal at the first read)."""
    address, files, _ = tls_cluster
    host, port = address.removeprefix("tls://").split(":")
    ctx = ssl.create_default_context(cafile=str(files["client"].ca))
    ctx.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"\0" * 16)
                if tls.recv(1) == b"":  # closed without a word: refused as well
                    raise ConnectionResetError


def test_a_plain_tcp_connection_to_the_tls_scheduler_is_refused(tls_cluster):
    address, _, _ = tls_cluster
    plain = address.replace("tls://", "tcp://")
    with pytest.raises((OSError, TimeoutError)):
        with distributed.Client(plain, timeout=3, set_as_default=False):
            pytest.fail("a plain-TCP client got in")
    host, port = plain.removeprefix("tcp://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x90" * 64)  # a Dask frame, in clear
        try:
            answer = s.recv(1024)
        except ConnectionError:
            answer = b""
    assert not answer.startswith(b"\x00"), answer  # a TLS alert at most, never a Dask reply


@pytest.mark.parametrize("how", ["another CA", "plain TCP"])
def test_a_worker_without_a_valid_certificate_cannot_join(tls_cluster, how):
    address, files, rogue = tls_cluster
    if how == "another CA":
        worker = _worker(address, "h2", _tls(rogue["h2"]), REFUSED_WORKER_DEATH_S)
    else:
        worker = _worker(address.replace("tls://", "tcp://"), "h2", [], REFUSED_WORKER_DEATH_S)
    try:
        # it gives up by itself (death timeout): wait for that, however long a busy host takes
        assert poll_until(lambda: worker.poll() is not None, timeout_s=JOIN_TIMEOUT_S)
        assert worker.returncode != 0, worker.stderr.read().decode()
        assert _workers(address, files) == ["h1"]
    finally:
        _kill([worker])


EXPERIMENT = """
name: tls
servers: {c: {impl: c, model: epoll}}
workload: {path: /work, params: {}}
load: {mode: closed, connections: 4, duration: 1s, warmup: 0.5s}
cluster:
  scheduler: ADDRESS
  connect_timeout: 10s
  tls: {ca: certs/ca.pem, cert: certs/client.pem, key: certs/client-key.pem}
placement: {server: {host: h1}, loadgen: {hosts: [h1]}}
"""


def test_a_trial_runs_on_the_tls_cluster_with_certificates_beside_the_file(
    tls_cluster, tmp_path, perfctl
):
    address, files, _ = tls_cluster
    shutil.copytree(files["client"].ca.parent, tmp_path / "certs")  # relative to the file
    exp = tmp_path / "tls.yaml"
    exp.write_text(EXPERIMENT.replace("ADDRESS", address))
    out = tmp_path / "run"
    done = perfctl("run", str(exp), "--out", str(out), "--no-plots")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plain TCP" not in done.stdout + done.stderr
    row = pd.read_csv(out / "trials.csv").iloc[0]
    assert row["requests"] > 0 and row["server_host"] == "h1"
    info = json.loads((out / "run.json").read_text())["cluster"]
    assert info["tls"] is True and info["warning"] is None and info["scheduler"] == address


def test_tls_files_are_checked_before_connecting(tls_cluster, tmp_path):
    _, files, _ = tls_cluster
    d = tmp_path / "c"
    shutil.copytree(files["client"].ca.parent, d)
    cfg = Cluster.model_validate(
        {
            "scheduler": "tls://127.0.0.1:1",
            "tls": {"ca": "c/ca.pem", "cert": "c/client.pem", "key": "c/missing-key.pem"},
        }
    )
    source = str(tmp_path / "exp.yaml")
    with pytest.raises(PerfctlError, match=r"cluster\.tls\.key`: .*missing-key.pem.*certs DIR"):
        Session(cfg, source, tmp_path / "w").open()
    os.chmod(d / "client-key.pem", 0o644)
    cfg = cfg.model_copy(
        update={"tls": cfg.tls.model_copy(update={"key": Path("c/client-key.pem")})}
    )
    with pytest.raises(PerfctlError, match=r"can be read by other users.*chmod 600"):
        Session(cfg, source, tmp_path / "w").open()


def test_perfctl_cluster_certs_makes_a_ca_and_a_certificate_per_end(tmp_path, perfctl):
    d = tmp_path / "certs"
    done = perfctl("cluster", "certs", str(d), "--hosts", "h1,h2,h3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--tls-cert h3.pem" in done.stdout and "tls://SCHEDULER:8786" in done.stdout
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    names = ["ca", "scheduler", "client", "h1", "h2", "h3"]
    for n in names:
        assert stat.S_IMODE((d / f"{n}-key.pem").stat().st_mode) == 0o600, n
        if n != "ca":  # each signed by the CA
            ok = subprocess.run(
                ["openssl", "verify", "-CAfile", str(d / "ca.pem"), str(d / f"{n}.pem")],
                capture_output=True,
                text=True,
            )
            assert ok.returncode == 0, ok.stdout + ok.stderr
    before = {f.name: f.read_bytes() for f in d.iterdir()}
    again = perfctl("cluster", "certs", str(d), "--hosts", "h1")
    assert again.returncode == 2 and "never overwrites" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr
    assert {f.name: f.read_bytes() for f in d.iterdir()} == before
