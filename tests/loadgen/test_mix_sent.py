"""A mix against a recording HTTP server: the headers really go out (an {env:} secret too, and
never into a file), each row's `request` index is the request the server saw, and the digest's
per-request figures add up to the window's."""

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest

from loadgen import digest
from loadgen.fields import RequestSpec
from loadgen.parallel import generate_to_dir
from loadgen.spec import LoadSpec

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

SECRET = "tok-5d1c0e9f-never-on-disk"


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # one write per answer (flushed after each): no delayed-ACK stalls
    disable_nagle_algorithm = True
    seen: list = []

    def _answer(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self.seen.append((self.command, self.path, dict(self.headers), body))
        status = 404 if self.path.startswith("/missing") else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def recorder():
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.usefixtures("live")
def test_a_mix_sends_its_headers_and_records_each_rows_request(recorder, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFCTL_TEST_TOKEN", SECRET)
    mix = (
        RequestSpec("list", 2, "GET", "/items?page={int:1..3}"),
        RequestSpec(
            "add",
            1,
            "POST",
            "/items",
            (("Content-Type", "application/json"),),
            '{"id": "{uuid}", "n": {int:1..9}}',
        ),
        RequestSpec("gone", 1, "DELETE", "/missing/{seq}"),
    )
    headers = (("Authorization", "Bearer {env:PERFCTL_TEST_TOKEN}"), ("X-Client", "perfctl"))
    spec = LoadSpec(
        port=recorder.server_address[1],
        requests=mix,
        headers=headers,
        connections=2,
        duration_s=0.6,
        warmup_s=0.0,
        seed=5,
    )
    out = tmp_path / "out"
    (tmp_path / "spec.json").write_text(spec.to_json())
    generate_to_dir(spec, out)

    seen = Recorder.seen
    assert len(seen) > 30
    for method, _path, hdrs, body in seen:
        assert hdrs["Authorization"] == f"Bearer {SECRET}"
        assert hdrs["X-Client"] == "perfctl"
        if method == "POST":
            assert hdrs["Content-Type"] == "application/json" and body.startswith(b'{"id": "')
    rows = pd.read_parquet(out / "requests.parquet")
    answered = rows[rows["status"] > 0]
    kinds = Counter(answered["request"])
    by_method = Counter(m for m, *_ in seen)
    assert kinds[0] == by_method["GET"] and kinds[1] == by_method["POST"]
    assert kinds[2] == by_method["DELETE"]
    assert (answered.loc[answered["request"] == 2, "status"] == 404).all()
    gone = [path for m, path, *_ in seen if m == "DELETE"]
    assert len(set(gone)) == len(gone)  # {seq}: each number went out once

    [w] = digest.read(out / "digest.json")["windows"]
    assert sorted(w.parts) == [0, 1, 2]
    for key in ("requests", "completed", "answered", "errors_http", "sent"):
        assert sum(p.counts[key] for p in w.parts.values()) == w.counts[key], key
    assert w.parts[2].counts["errors_http"] == w.parts[2].counts["requests"] > 0

    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
    assert b"{env:PERFCTL_TEST_TOKEN}" in (tmp_path / "spec.json").read_bytes()


@pytest.mark.usefixtures("live")
def test_a_replay_in_two_processes_sends_the_files_requests(recorder, tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text(
        '{"name": "get", "path": "/items?page=1"}\n'
        '{"name": "post", "method": "POST", "path": "/items", "body": {"id": 1}}\n'
        '{"name": "gone", "path": "/missing"}\n'
    )
    spec = LoadSpec(
        port=recorder.server_address[1],
        replay_file=str(f),
        replay_names=("get", "post", "gone"),
        connections=2,
        processes=2,
        duration_s=2.0,  # both processes start and reach the third line on a busy host too
        warmup_s=0.0,
    )
    out = tmp_path / "out"
    generate_to_dir(spec, out)
    seen = Counter((m, p) for m, p, *_ in Recorder.seen)
    assert set(seen) == {("GET", "/items?page=1"), ("POST", "/items"), ("GET", "/missing")}
    rows = pd.read_parquet(out / "requests.parquet")
    answered = rows[rows["status"] > 0]
    assert Counter(answered["request"]) == {
        0: seen[("GET", "/items?page=1")],
        1: seen[("POST", "/items")],
        2: seen[("GET", "/missing")],
    }
    [w] = digest.read(out / "digest.json")["windows"]
    assert sum(p.counts["requests"] for p in w.parts.values()) == w.counts["requests"]


@pytest.mark.usefixtures("live")
def test_perfctl_load_sends_its_headers(recorder, monkeypatch):
    from orchestrator.api.load_url import load  # the ad-hoc command's API, for this test only

    monkeypatch.setenv("PERFCTL_TEST_TOKEN", SECRET)
    url = f"http://127.0.0.1:{recorder.server_address[1]}/items"
    r = load(
        url,
        connections=1,
        duration="300ms",
        warmup="0s",
        headers=["Authorization: Bearer {env:PERFCTL_TEST_TOKEN}", "X-Client: adhoc"],
    )
    assert r["requests"] > 0
    assert all(h["Authorization"] == f"Bearer {SECRET}" for _, _, h, _ in Recorder.seen)
    assert all(h["X-Client"] == "adhoc" for _, _, h, _ in Recorder.seen)


@pytest.mark.parametrize(
    "mode, keepalive",
    [("open", True), ("open", False), ("closed", False), ("burst", False)],
    ids=["open-dropped", "open-refused", "closed-refused", "burst-refused"],
)
@pytest.mark.usefixtures("live")
def test_a_request_that_never_got_an_answer_counts_under_its_request(tmp_path, mode, keepalive):
    """A mix: an open arrival dropped over the outstanding cap (keep-alive), or an attempt whose
    connect failed (open, closed and burst), is a row of the request it would have been, so
    each endpoint's errors are its own, not all request 0's."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if keepalive:
        listener.listen(8)  # connects complete in the backlog; no answer ever comes
    else:
        listener.close()  # nothing listens: every connect is refused
    mix = (RequestSpec("a", 1, "GET", "/a"), RequestSpec("b", 1, "GET", "/b"))
    spec = LoadSpec(
        port=port,
        requests=mix,
        mode=mode,
        rate_rps=800,
        connections={"open": 1, "closed": 8, "burst": 400}[mode],
        max_outstanding=1,
        keepalive=keepalive,
        bursts=1,
        burst_interval_s=0.5,
        duration_s=0.5,
        warmup_s=0.0,
        timeout_s=0.3,
        seed=3,
    )
    try:
        generate_to_dir(spec, tmp_path / "out")
    finally:
        listener.close()
    rows = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    failed = rows[rows["status"] == 0]
    assert len(failed) > 200 and len(failed) > 0.9 * len(rows)
    share_b = (failed["request"] == 1).mean()
    assert abs(share_b - 0.5) < 4.5 * (0.25 / len(failed)) ** 0.5, share_b
