"""The load generator against servers other than the bundled Python one, and against none:
responses framed oddly (chunked, close-delimited, truncated, a framing that changes mid
connection, Server-Timing that starts mid connection), a server that stalls (coordinated
omission), nginx, the bundled C server, and a listener that never accepts. Bounds are loose:
the machine is shared. (Every load mode against the Python server: test_loadgen_modes.py.)"""

import numpy as np
import pytest
from phase_kit import generate

from loadgen import records as lrec

pytestmark = pytest.mark.usefixtures("live")


def test_chunked_and_close_delimited_responses(tmp_path, odd_server):
    for path in ("/chunked", "/close", "/plain"):
        df, _, row = generate(
            tmp_path, odd_server, path, mode="closed", connections=2, duration_s=0.5, warmup_s=0.0
        )
        assert row["completed"] > 10 and row["errors"] == 0, path
        assert (df["status"] == 200).all()


def test_truncated_body_is_an_error_not_an_answer(tmp_path, odd_server):
    df, _, row = generate(
        tmp_path,
        odd_server,
        "/truncated",
        mode="closed",
        connections=2,
        duration_s=0.5,
        warmup_s=0.0,
    )
    assert len(df) > 10 and row["completed"] == 0
    assert (df["error"] == lrec.RESET).mean() > 0.9


def test_framing_that_changes_mid_connection(tmp_path, odd_server):
    """After 19 keep-alive answers a connection's 20th response runs to the FIN (an answer)
    or is cut short of its Content-Length (an error), whichever parser reads it."""
    df, _, _ = generate(
        tmp_path,
        odd_server,
        "/close-later",
        mode="closed",
        connections=2,
        duration_s=0.5,
        warmup_s=0.0,
    )
    done = df[df["error"] != lrec.UNFINISHED]  # the phase's end cuts the last ones
    assert len(done) > 60 and (done["error"] == 0).all() and (done["status"] == 200).all()
    assert (done.groupby("conn").size() == 20).sum() >= 3
    df, _, _ = generate(
        tmp_path,
        odd_server,
        "/truncated-later",
        mode="closed",
        connections=2,
        duration_s=0.5,
        warmup_s=0.0,
    )
    per_conn = df.groupby("conn")["error"].agg(["size", "last", "sum"])
    full = per_conn[per_conn["size"] == 20]
    assert len(full) >= 3 and (full["last"] == lrec.RESET).all()
    assert (full["sum"] == lrec.RESET).all()  # the 19 before were answers


def test_server_timing_found_when_it_starts_mid_connection(tmp_path, odd_server):
    """Connections that have not carried Server-Timing are rechecked every RECHECK
    responses: a header that appears on the 40th response is read from then on."""
    from loadgen.client import RECHECK

    df, _, row = generate(
        tmp_path,
        odd_server,
        "/timing-later",
        mode="closed",
        connections=1,
        duration_s=0.5,
        warmup_s=0.0,
    )
    assert row["errors"] == 0 and len(df) > 40 + 2 * RECHECK
    has = df["svc_ms"].notna().to_numpy()
    first = int(np.argmax(has))
    assert 39 <= first < 39 + RECHECK
    assert has[first:].all() and not has[:39].any()
    assert np.allclose(df["svc_ms"].to_numpy()[first:], 0.25)


def test_coordinated_omission_is_not_hidden(tmp_path, stall_server):
    """A server freezing 500 ms every second: open load sees it in its p99, while a closed
    single connection (the classic benchmark view) hides it."""
    _, _, open_row = generate(
        tmp_path,
        stall_server,
        "/",
        mode="open",
        rate_rps=200,
        connections=64,
        duration_s=4.0,
        warmup_s=0.5,
    )
    _, _, closed_row = generate(
        tmp_path, stall_server, "/", mode="closed", connections=1, duration_s=4.0, warmup_s=0.5
    )
    assert open_row["latency_p99_ms"] >= 250
    assert closed_row["latency_p99_ms"] < 100
    assert closed_row["latency_max_ms"] >= 250  # the stall is there, just hidden


def test_against_nginx(tmp_path, nginx_server):
    _, _, closed = generate(tmp_path, nginx_server, "/", mode="closed", connections=16)
    _, _, opened = generate(tmp_path, nginx_server, "/", mode="open", rate_rps=500, connections=8)
    assert closed["errors"] == 0 and closed["throughput_rps"] > 500
    assert opened["errors"] == 0 and opened["requests"] > 500


def test_against_the_c_server(tmp_path, c_server):
    _, _, row = generate(tmp_path, c_server, "/work?spin_us=50", mode="closed", connections=8)
    assert row["errors"] == 0 and row["completed"] > 100


def test_connects_cut_short_are_never_counted_as_answers(tmp_path):
    """A listener that never accepts: its backlog fills and later connects hang. Rows whose
    connect was still waiting when the phase ended must carry an error, not look answered."""
    import socket

    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(1)

        class Stuck:
            port = lsock.getsockname()[1]

        df, summary, row = generate(
            tmp_path,
            Stuck,
            "/",
            mode="open",
            rate_rps=200,
            connections=4,
            keepalive=False,
            timeout_s=0.3,
            duration_s=0.6,
            warmup_s=0.0,
        )
    assert row["completed"] == 0 and row["errors"] == row["requests"] > 0
    assert ((df["error"] != 0) | (df["status"] > 0)).all()
    assert summary["closed_out"] > 0
