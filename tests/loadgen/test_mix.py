"""loadgen/mix.py and fields.py: a mix's proportions, its generated fields, determinism per seed and per
process stream, and the bytes of a request without fields."""

import re
from collections import Counter

import numpy as np
import pytest
from scipy.stats import chisquare

from loadgen.fields import RequestSpec, check_mix, fields_in
from loadgen.mix import Feed
from loadgen.modes import mode_for
from loadgen.records import Chunk
from loadgen.spec import LoadSpec
from loadgen.worker import build_request

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
MIX = (
    RequestSpec("get", 6, "GET", "/work?spin_us=10"),
    RequestSpec("put", 3, "PUT", "/item/{int:1..5000}?side={choice:left|right}", (), "{text:16}"),
    RequestSpec("post", 1, "POST", "/register", (("X-Id", "{uuid}"),), '{"k": {zipf:1.1:1000}}'),
)


def feed(seed=7, requests=MIX, **kw):
    return Feed(requests, (("X-Run", "t"),), "127.0.0.1", 8080, True, seed, **kw)


def test_mix_proportions_are_the_weights_within_sampling_error():
    kinds, _ = feed().render(20_000)
    observed = np.bincount(kinds, minlength=3)
    expected = 20_000 * np.array([6, 3, 1]) / 10
    assert chisquare(observed, expected).pvalue > 0.001, observed


def test_a_zero_weight_request_is_never_sent():
    reqs = (RequestSpec("a", 1, "GET", "/a"), RequestSpec("b", 0, "GET", "/b"))
    kinds, out = feed(requests=reqs).render(5_000)
    assert set(kinds) == {0} and all(b.startswith(b"GET /a ") for b in out)


def test_same_seed_same_bytes_in_the_same_order_another_seed_differs():
    a, b, c = feed(seed=11), feed(seed=11), feed(seed=12)
    first = [a.render(700) for _ in range(3)]
    assert first == [b.render(700) for _ in range(3)]
    assert first != [c.render(700) for _ in range(3)]


def test_processes_draw_disjoint_streams_and_deal_a_csv_files_rows(tmp_path):
    users = tmp_path / "users.csv"
    users.write_text("name,age\n" + "".join(f"u{i},{i}\n" for i in range(10)))
    reqs = (RequestSpec("r", 1, "GET", f"/u/{{file:{users}:name}}?n={{int:1..1000000}}"),)
    parts = [feed(requests=reqs, stream=i, streams=2).render(5)[1] for i in range(2)]
    names = [[re.search(rb"/u/(\w+)", r).group(1).decode() for r in p] for p in parts]
    assert names == [["u0", "u2", "u4", "u6", "u8"], ["u1", "u3", "u5", "u7", "u9"]]
    nums = [{re.search(rb"n=(\d+)", r).group(1) for r in p} for p in parts]
    assert nums[0] != nums[1]


def test_generated_fields_have_their_shapes(tmp_path):
    kinds, out = feed().render(3_000)
    by = {k: [r for kk, r in zip(kinds, out) if kk == k] for k in range(3)}
    for r in by[1]:
        head, body = r.split(b"\r\n\r\n", 1)
        item = int(re.search(rb"/item/(\d+)\?", head).group(1))
        assert 1 <= item <= 5000
        assert re.search(rb"side=(left|right) ", head)
        assert re.fullmatch(rb"[A-Za-z0-9]{16}", body)
        assert int(re.search(rb"Content-Length: (\d+)", head).group(1)) == len(body)
    keys = Counter()
    for r in by[2]:
        head, body = r.split(b"\r\n\r\n", 1)
        assert UUID4.match(re.search(rb"X-Id: (\S+)", head).group(1).decode())
        k = int(re.fullmatch(rb'\{"k": (\d+)\}', body).group(1))
        assert 1 <= k <= 1000
        keys[k] += 1
    assert keys.most_common(1)[0][0] == 1  # Zipf: key 1 is the hottest


def test_a_csv_column_is_read_in_order_and_loops_or_at_random(tmp_path):
    users = tmp_path / "u.csv"
    users.write_text("name\nann\nbob\ncy\n")
    order = feed(requests=(RequestSpec("r", 1, "GET", f"/{{file:{users}:name}}"),))
    got = [re.match(rb"GET /(\w+)", r).group(1) for r in order.render(7)[1]]
    assert got == [b"ann", b"bob", b"cy", b"ann", b"bob", b"cy", b"ann"]
    rand = feed(requests=(RequestSpec("r", 1, "GET", f"/{{file:{users}:name:random}}"),))
    got = {re.match(rb"GET /(\w+)", r).group(1) for r in rand.render(200)[1]}
    assert got == {b"ann", b"bob", b"cy"}


def test_a_request_without_fields_is_the_bytes_of_the_one_request_form():
    spec = LoadSpec(target="/work?spin_us=5", method="POST", body="a=1", headers=(("X-A", "1"),))
    one = (RequestSpec("w", 1, "POST", "/work?spin_us=5", (), "a=1"),)
    f = Feed(one, (("X-A", "1"),), spec.host, spec.port, True, 1)
    assert f.render(2)[1] == [build_request(spec)] * 2
    closing = Feed(one, (("X-A", "1"),), spec.host, spec.port, False, 1)
    assert closing.render(1)[1] == [build_request(spec, keepalive=False)]


def test_env_headers_are_read_in_the_load_generator_process_only():
    reqs = (RequestSpec("r", 1, "GET", "/", (("Authorization", "Bearer {env:TOK}"),)),)
    f = Feed(reqs, (), "h", 1, True, 1, environ={"TOK": "s{3}cr"})
    assert b"Authorization: Bearer s{3}cr\r\n" in f.render(1)[1][0]
    with pytest.raises(ValueError, match="TOK is not set"):
        Feed(reqs, (), "h", 1, True, 1, environ={})


def test_take_notes_the_request_index_and_renders_the_next_chunk_ahead():
    asked = []
    f = feed(chunk_requests=8, schedule=asked.append)
    chunk = Chunk(64)
    sent = [f.take(chunk, i) for i in range(20)]
    assert asked, "the next chunk is asked for before the current one runs out"
    ref = feed(chunk_requests=8)
    kinds = []
    for _ in range(3):
        k, _ = ref.render(8)
        kinds += k
    assert list(chunk.arrays["request"][:20]) == kinds[:20]
    assert all(isinstance(b, bytes) for b in sent)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("/{foo:1}", "unknown generated field {foo:1}"),
        ("/{int:9..1}", "malformed"),
        ("/{int:x}", "malformed"),
        ("/{text:0}", "malformed"),
        ("/{zipf:1.1}", "malformed"),
        ("/{uuid:4}", "takes no argument"),
        ("/{file:users.csv}", "malformed"),
        ("/{choice}", "needs an argument"),
    ],
)
def test_a_bad_field_is_refused_with_its_fix(text, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        fields_in(text)


@pytest.mark.parametrize(
    "weights, names, needle",
    [
        ((0, 0), ("a", "b"), "sum to 0"),
        ((1, -1), ("a", "b"), "weights must be >= 0"),
        ((1, 1), ("a", "a"), "a is used twice"),
    ],
)
def test_a_bad_mix_is_refused(weights, names, needle):
    reqs = tuple(RequestSpec(n, w) for n, w in zip(names, weights))
    with pytest.raises(ValueError, match=re.escape(needle)):
        check_mix(reqs)


def test_a_spec_with_a_mix_survives_its_json():
    spec = LoadSpec(requests=MIX, headers=(("X-Run", "t"),))
    assert LoadSpec.from_json(spec.to_json()) == spec
    assert spec.templated  # requests differ: the fast path takes each from the feed


@pytest.mark.parametrize("mode", ["closed", "open", "burst"])
def test_each_process_of_a_phase_gets_its_own_stream(mode):
    spec = LoadSpec(mode=mode, rate_rps=100, connections=4, processes=2, requests=MIX)
    whole = mode_for(spec)
    streams = [whole.share(i, 2, 0).spec for i in range(2)]
    assert [(s.shard_index, s.shard_count) for s in streams] == [(0, 2), (1, 2)]
