"""Replay files (loadgen/replay.py, mix.ReplayFeed): both formats, order and shuffle, looping,
processes dealing the lines out, and every malformed file refused by scan()."""

import json
import re

import pytest

from loadgen.mix import ReplayFeed
from loadgen.records import Chunk
from loadgen.replay import plain_request, scan
from loadgen.spec import LoadSpec
from loadgen.worker import build_request


def targets(tmp_path, n=5):
    f = tmp_path / "targets.txt"
    f.write_text("# searches\n" + "".join(f"/search?q={i}\n\n" for i in range(n)) + "/health\n")
    return f


def feed(path, order="order", names=None, **kw):
    names = names or tuple(scan(str(path)))
    return ReplayFeed(str(path), order, names, (("X-Run", "r"),), "h", 80, True, 9, **kw)


def sent_targets(reqs):
    return [re.match(rb"\w+ (\S+) ", r).group(1).decode() for r in reqs]


def test_a_file_of_targets_is_replayed_in_order_and_loops(tmp_path):
    f = targets(tmp_path, 3)
    assert scan(str(f)) == ["/search", "/health"]
    kinds, reqs = feed(f).render(9)
    assert sent_targets(reqs) == ["/search?q=0", "/search?q=1", "/search?q=2", "/health"] * 2 + [
        "/search?q=0"
    ]
    assert kinds == [0, 0, 0, 1, 0, 0, 0, 1, 0]
    assert reqs[0] == b"GET /search?q=0 HTTP/1.1\r\nHost: h:80\r\nX-Run: r\r\n\r\n"


def test_shuffle_is_a_fresh_permutation_each_pass_drawn_from_the_seed(tmp_path):
    f = targets(tmp_path, 20)
    a = sent_targets(feed(f, "shuffle").render(42)[1])
    assert a == sent_targets(feed(f, "shuffle").render(42)[1])  # same seed, same order
    first, second = a[:21], a[21:42]
    assert sorted(first) == sorted(second) == sorted(sent_targets(feed(f).render(21)[1]))
    assert first != second and first != sent_targets(feed(f).render(21)[1])


def test_processes_deal_the_lines_out(tmp_path):
    f = targets(tmp_path, 5)  # six requests
    parts = [sent_targets(feed(f, stream=i, streams=2).render(3)[1]) for i in range(2)]
    assert parts == [["/search?q=0", "/search?q=2", "/search?q=4"],
                     ["/search?q=1", "/search?q=3", "/health"]]  # fmt: skip


def test_jsonl_lines_carry_method_headers_body_and_name(tmp_path):
    f = tmp_path / "r.jsonl"
    lines = [
        {"name": "add", "method": "POST", "path": "/items", "body": {"id": 7}},
        {"path": "/items", "params": {"page": 2}, "headers": {"X-Run": "mine"}},
    ]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert scan(str(f)) == ["add", "/items"]
    chunk = Chunk(4)
    fd = feed(f)
    post, get = fd.take(chunk, 0), fd.take(chunk, 1)
    assert list(chunk.arrays["request"][:2]) == [0, 1]
    assert post.endswith(b'\r\n\r\n{"id": 7}') and b"Content-Type: application/json" in post
    assert get.startswith(b"GET /items?page=2 HTTP/1.1") and b"X-Run: mine" in get
    assert b"X-Run: r" not in get  # the line's own header wins


def test_plain_request_is_the_one_request_forms_bytes():
    spec = LoadSpec(target="/r", method="POST", body="a=1", headers=(("X-A", "1"),))
    assert plain_request("POST", "/r", [("X-A", "1")], b"a=1", spec.host, spec.port, True) == (
        build_request(spec)
    )


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("empty.txt", "# only a comment\n\n", "holds no request"),
        ("bad.txt", "/ok\nsearch?q=1\n", "line 2 of"),
        ("bad.jsonl", '{"path": "/a"}\n{"path": "/b"\n', "line 2 of"),
        ("nopath.jsonl", '{"method": "GET"}\n', 'needs "path"'),
        ("array.jsonl", "[1, 2]\n", "not a JSON object"),
        ("method.jsonl", '{"path": "/a", "method": "GE T"}\n', "not an HTTP method"),
    ],
)
def test_a_malformed_replay_file_is_refused_naming_the_line(tmp_path, name, text, needle):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(ValueError, match=re.escape(needle)):
        scan(str(f))


def test_too_many_endpoint_names_are_refused(tmp_path):
    f = tmp_path / "many.txt"
    f.write_text("".join(f"/p{i}\n" for i in range(1002)))
    with pytest.raises(ValueError, match="more than 1000 endpoints"):
        scan(str(f))
