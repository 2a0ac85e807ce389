"""What a request mix costs per request (issue 28): renders/s of loadgen/mix.py's Feed, by mix.

    .venv/bin/python benchmarks/mix_render.py [--requests 200000]

For each mix: requests rendered per second and the cost per request in microseconds (whole
chunks, as the load generator renders them, CHUNK_REQUESTS at a time), the longest single
chunk (how long one rendering callback holds the event loop), and the peak of Python-traced
allocations over up to 200 chunks, in a second pass (flat: one chunk at a time). The fixed request and
{seq} alone never go through the Feed; "fixed via Feed" is the floor of the Feed itself.
Timings need a quiet host.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loadgen.fields import RequestSpec  # noqa: E402
from loadgen.mix import CHUNK_REQUESTS, Feed  # noqa: E402


def mixes(users: Path) -> dict[str, tuple[RequestSpec, ...]]:
    json_body = '{"swiper": {int:1..5000}, "swipee": {int:1..1000000}, "comment": "{text:64}"}'
    return {
        "fixed via Feed": (RequestSpec("w", 1, "GET", "/work?spin_us=10"),),
        "4 fixed endpoints": tuple(
            RequestSpec(f"e{i}", 1, "GET", f"/e{i}?spin_us=10") for i in range(4)
        ),
        "uuid in the body": (RequestSpec("r", 1, "POST", "/register", (), "user={uuid}"),),
        "4 endpoints, JSON bodies, 3 headers": (
            RequestSpec(
                "swipe",
                4,
                "POST",
                "/swipe/{choice:left|right}/",
                (("Content-Type", "application/json"),),
                json_body,
            ),
            RequestSpec("user", 2, "GET", f"/users/{{file:{users}:name}}"),
            RequestSpec("item", 2, "GET", "/items?key={zipf:1.1:10000}"),
            RequestSpec("health", 1, "GET", "/health"),
        ),
    }


def measure(reqs, n: int) -> tuple[float, float, int]:
    headers = (("Authorization", "Bearer t"), ("X-Client", "bench"), ("Accept", "*/*"))
    chunks = max(1, n // CHUNK_REQUESTS)
    feed = Feed(reqs, headers, "127.0.0.1", 8080, True, seed=1)
    longest = 0.0
    t0 = time.perf_counter()
    for _ in range(chunks):
        c0 = time.perf_counter()
        feed.render(CHUNK_REQUESTS)
        longest = max(longest, time.perf_counter() - c0)
    total = time.perf_counter() - t0
    # memory in a second pass: tracemalloc slows every allocation several times over
    feed = Feed(reqs, headers, "127.0.0.1", 8080, True, seed=1)
    tracemalloc.start()
    for _ in range(min(chunks, 200)):
        feed.render(CHUNK_REQUESTS)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return chunks * CHUNK_REQUESTS / total, longest, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        users = Path(tmp) / "users.csv"
        users.write_text("name\n" + "".join(f"user{i}\n" for i in range(10_000)))
        print(f"{'mix':38} {'renders/s':>10} {'us/request':>10} {'longest chunk':>14} {'peak':>8}")
        for name, reqs in mixes(users).items():
            rate, longest, peak = measure(reqs, args.requests)
            print(
                f"{name:38} {rate:10,.0f} {1e6 / rate:10.2f} {longest * 1e3:11.2f} ms "
                f"{peak / 2**20:6.1f}MB"
            )


if __name__ == "__main__":
    main()
