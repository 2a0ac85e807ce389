"""`perfctl load https://...`: a server with a certificate made in the test is loaded and its
handshakes reported; a certificate that does not verify, or a plain-HTTP server behind
https://, is exit 2 and one paragraph before any load."""

import json
import socket
import time
from pathlib import Path

import pytest
from cli_kit import perfctl

from orchestrator.proc import ports, process
from orchestrator.run import bundled
from orchestrator.run.certs import RunCertificate

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

ROOT = Path(__file__).resolve().parents[2]


def _serve(*extra: str, host: str = "127.0.0.1"):
    port = ports.free_port()
    proc = process.spawn(bundled.command("python", "async", port, host=host) + list(extra))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return port, proc
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the server did not listen")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    cert = RunCertificate.make(tmp_path_factory.mktemp("tls"))
    tls = ("--tls-cert", str(cert.cert_file), "--tls-key", str(cert.key_file))
    tls_port, tls_proc = _serve(*tls)
    # the certificate names localhost, 127.0.0.1 and ::1, not 127.0.0.2
    other_port, other_proc = _serve(*tls, host="127.0.0.2")
    plain_port, plain_proc = _serve()
    yield cert, tls_port, plain_port, other_port
    for proc in (tls_proc, other_proc, plain_proc):
        process.terminate(proc)
    cert.remove()


@pytest.mark.usefixtures("live")
def test_an_https_url_is_loaded_and_its_handshakes_reported(servers):
    cert, port, _, _ = servers
    url = f"https://localhost:{port}/work"
    done = perfctl(
        "load",
        url,
        "-c",
        "2",
        "-d",
        "0.3s",
        "--warmup",
        "0s",
        "--cacert",
        str(cert.ca_file),
        "--json",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    r = json.loads(done.stdout)
    assert r["requests"] > 0 and r["errors"] == 0
    assert r["tls"]["connections"] == 2 and r["tls"]["handshake_p50_ms"] > 0
    text = perfctl(
        "load",
        url,
        "-c",
        "1",
        "-d",
        "0.3s",
        "--warmup",
        "0s",
        "--no-keepalive",
        "--cacert",
        str(cert.ca_file),
    )
    assert text.returncode == 0, text.stdout + text.stderr
    assert "tls 1.3" in text.stdout and "resumed" in text.stdout


@pytest.mark.usefixtures("live")
def test_an_unknown_ca_is_exit_2_and_one_paragraph(servers, assert_clean_error):
    _, port, _, _ = servers
    done = perfctl("load", f"https://localhost:{port}/", "-d", "0.3s")
    assert_clean_error(done, "does not verify", "--cacert", "nothing was loaded")
    assert "throughput" not in done.stdout


@pytest.mark.usefixtures("live")
def test_a_wrong_hostname_is_exit_2_and_one_paragraph(servers, assert_clean_error):
    cert, _, _, port = servers
    done = perfctl(
        "load", f"https://127.0.0.2:{port}/", "-d", "0.3s", "--cacert", str(cert.ca_file)
    )
    assert_clean_error(done, "does not verify for '127.0.0.2'", "mismatch")


@pytest.mark.usefixtures("live")
def test_a_plain_http_server_behind_https_is_exit_2_and_one_paragraph(servers, assert_clean_error):
    _, _, plain, _ = servers
    done = perfctl("load", f"https://127.0.0.1:{plain}/", "-d", "0.3s", "--insecure")
    assert_clean_error(done, "does not speak TLS", "nothing was loaded")


def test_tls_flags_on_an_http_url_are_exit_2(assert_clean_error, tmp_path):
    done = perfctl("load", "http://127.0.0.1:9/", "--insecure")
    assert_clean_error(done, "--insecure", "https://")
