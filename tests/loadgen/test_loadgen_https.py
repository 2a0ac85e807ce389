"""HTTPS in the load generator (loadgen/tls.py): the bundled Python server with a certificate
made in the test, the handshake column, session resumption on and off, and the probe that
turns a bad certificate or a plain-HTTP server into one sentence."""

import pyarrow.parquet as pq
import pytest

from loadgen import generate_to_dir
from loadgen.spec import LoadSpec
from loadgen.tls import probe
from orchestrator.run.certs import RunCertificate

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed


def _load(tmp_path, port, cert, **kw):
    spec = LoadSpec(
        port=port,
        target="/work",
        connections=2,
        duration_s=0.4,
        timeout_s=2.0,
        tls=True,
        tls_ca_file=str(cert.ca_file),
        **kw,
    )
    summary = generate_to_dir(spec, tmp_path)
    rows = pq.read_table(tmp_path / "requests.parquet").to_pandas()
    return summary, rows


def test_keepalive_https_times_the_handshake_on_the_row_that_opened_each_connection(
    tmp_path, tls_server, run_cert
):
    summary, rows = _load(tmp_path, tls_server.port, run_cert)
    assert (rows["error"] == 0).all() and (rows["status"] == 200).all()
    assert len(rows) > 10
    opened = rows[rows["tls_handshake_ms"].notna()]
    assert len(opened) == 2  # one row per connection, the first on each
    assert (opened["tls_handshake_ms"] > 0).all()
    assert sorted(opened.groupby("conn")["sent_ns"].min()) == sorted(opened["sent_ns"])
    assert summary["tls_connections"] == 2
    assert summary["tls_handshake_p50_ms"] > 0


@pytest.mark.parametrize("resume", [True, False])
def test_new_connections_resume_the_session_only_when_resumption_is_on(
    tmp_path, tls_server, run_cert, resume
):
    summary, rows = _load(tmp_path, tls_server.port, run_cert, keepalive=False, tls_resume=resume)
    assert (rows["error"] == 0).all() and len(rows) > 5
    assert rows["tls_handshake_ms"].notna().all()  # a connection per request
    assert (rows["tls_handshake_ms"] > 0).all()
    assert summary["tls_connections"] >= len(rows)
    if resume:  # every connection after the first closed one offers its ticket
        assert summary["tls_resumed"] >= summary["tls_connections"] - 3
    else:
        assert summary["tls_resumed"] == 0


def test_the_probe_passes_a_good_server_and_names_what_is_wrong_with_a_bad_one(
    tls_server, py_server, run_cert
):
    good = LoadSpec(port=tls_server.port, tls=True, tls_ca_file=str(run_cert.ca_file))
    assert probe(good) is None
    other = RunCertificate.make(run_cert.directory.parent)
    try:
        unknown_ca = probe(LoadSpec(port=tls_server.port, tls=True, tls_ca_file=str(other.ca_file)))
    finally:
        other.remove()
    assert "does not verify" in unknown_ca and "issuer" in unknown_ca
    wrong_name = probe(
        LoadSpec(
            port=tls_server.port,
            tls=True,
            tls_ca_file=str(run_cert.ca_file),
            tls_server_name="example.com",
        )
    )
    assert "does not verify for 'example.com'" in wrong_name
    assert "Hostname mismatch" in wrong_name
    plain = probe(LoadSpec(port=py_server.port, tls=True, tls_verify=False))
    assert "does not speak TLS" in plain
    assert probe(LoadSpec(port=tls_server.port, tls=True, tls_verify=False)) is None


def test_plain_http_rows_have_no_handshake_and_the_summary_no_tls_figures(tmp_path, py_server):
    spec = LoadSpec(port=py_server.port, target="/work", connections=1, duration_s=0.2)
    summary = generate_to_dir(spec, tmp_path)
    rows = pq.read_table(tmp_path / "requests.parquet").to_pandas()
    assert len(rows) > 0 and rows["tls_handshake_ms"].isna().all()
    assert not any(k.startswith("tls_") for k in summary)


def test_a_run_certificate_keeps_its_keys_private_and_removes_them(tmp_path):
    c = RunCertificate.make(tmp_path)
    assert c.directory.stat().st_mode & 0o777 == 0o700
    for f in (c.ca_file, c.cert_file, c.key_file):
        assert f.stat().st_mode & 0o777 == 0o600
    assert b"PRIVATE KEY" in c.key_file.read_bytes()
    c.remove()
    assert not c.directory.exists()
