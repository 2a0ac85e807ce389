"""The bundled RMI load driver's own parts (servers/java/src/perfctl/driver): its histograms,
which collector notifications count as pauses, and RowWriter, the stream of rows to
requests.csv that keeps its memory flat. Driven through tests/servers_java/java/.../DriverUnits,
compiled here against the driver's classes. (loadgen/test_driver_contract.py runs the driver
through real trials; tests/loadgen/test_rmi_driver_load.py runs it under load.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def units(jkit, tmp_path_factory):
    """argv prefix that runs DriverUnits (compiled once) on the newest JDK."""
    out = tmp_path_factory.mktemp("driver-units")
    src = HERE / "java" / "perfctl" / "driver" / "DriverUnits.java"
    java = Path(jkit.newest_java())
    javac = java.with_name("javac")
    proc = subprocess.run(
        [str(javac), "--release", "17", "-cp", str(jkit.CLASSES), "-d", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [str(java), "-cp", f"{out}:{jkit.CLASSES}", "perfctl.driver.DriverUnits"]


def _run(units, *args: str, stdin: str = "") -> dict[str, str]:
    proc = subprocess.run([*units, *args], input=stdin, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_histogram_percentiles_are_within_0_2_percent_of_the_exact_ones(units):
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            rng.integers(0, 1024, 500),  # exact below 1024 ns
            rng.lognormal(12, 2, 20_000).astype(np.int64),  # ~160 us, tail to seconds
            [0, 5_000_000_000],
        ]
    )
    proc = subprocess.run(
        [*units, "histogram"],
        input="\n".join(map(str, values)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    p50, p99, top, count = (int(x) for x in proc.stdout.split())
    assert count == len(values) and top == values.max()
    for got, q in ((p50, 50), (p99, 99)):
        exact = np.percentile(values, q, method="inverted_cdf")
        assert exact <= got <= exact * 1.002 + 1, (q, got, exact)  # never below: upper edge


def test_small_values_are_counted_exactly(units):
    proc = subprocess.run(
        [*units, "histogram"], input="3\n3\n7\n1000\n", capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.split() == ["3", "1000", "1000", "4"]


def test_only_stop_the_world_collections_count_as_gc_pauses(units):
    beans = {
        "Copy": True,  # Serial
        "MarkSweepCompact": True,
        "PS Scavenge": True,  # Parallel
        "PS MarkSweep": True,
        "G1 Young Generation": True,
        "G1 Old Generation": True,
        "G1 Concurrent GC": False,  # JDK 21+: G1's concurrent cycle, beside the application
        "ZGC Pauses": True,  # JDK 17
        "ZGC Cycles": False,
        "ZGC Minor Pauses": True,  # JDK 21+ generational ZGC
        "ZGC Minor Cycles": False,
        "ZGC Major Cycles": False,
        "Shenandoah Pauses": True,
        "Shenandoah Cycles": False,
    }
    got = _run(units, "is-pause", *beans)
    assert {k: v == "true" for k, v in got.items()} == beans


def test_row_writer_streams_every_row_exactly_as_recorded(units, tmp_path):
    summary = _run(units, "rows", str(tmp_path), "8")
    assert not (tmp_path / "requests.csv.part").exists()
    table = pacsv.read_csv(tmp_path / "requests.csv").to_pandas()
    block = int(summary["row_block_rows"])
    in_order = 3 * block + 5
    assert int(summary["rows"]) == int(summary["rows_added"]) == len(table) == in_order + 103
    t = table.set_index("intended_ns").sort_index()
    assert list(t.index) == list(range(1, len(table) + 1))  # each row once
    first = t.loc[1:in_order]
    assert (
        first[["sent_ns", "first_byte_ns", "done_ns", "status"]].to_numpy() == [10, 11, 12, 200]
    ).all()
    assert (first["svc_ms"] == 1.234567).all() and (first["db_ms"] == -2.5).all()
    assert first["queue_ms"].isna().sum() == (in_order + 1) // 2  # Rows.NONE: an empty field
    assert (first["queue_ms"].dropna() == 0.000005).all()
    ended_elsewhere = t.loc[in_order + 1 : in_order + 100]
    assert (ended_elsewhere["error"] == 0).sum() == 99 and (
        ended_elsewhere["status"] == 503
    ).sum() == 99
    dropped = ended_elsewhere[ended_elsewhere["error"] == 5]
    assert len(dropped) == 1 and dropped["done_ns"].iloc[0] == 99 and dropped["conn"].iloc[0] == -1
    # left open when the phase ended: closed out as timeout (sent 10 s before, timeout 5 s) and
    # unfinished (never sent); the answered one untouched
    late, never, answered = (t.loc[in_order + 100 + j] for j in (1, 2, 3))
    assert (late["error"], never["error"], answered["error"]) == (3, 6, 0)
    assert late["done_ns"] == never["done_ns"] == 10_000_000_000 and answered["done_ns"] == 31
    assert summary["closed_out"] == "2"
    assert int(summary["row_blocks_made"]) <= int(summary["row_blocks_peak"]) + 2  # recycled


@pytest.mark.parametrize("producers, block_rows, max_blocks", [(8, 4096, 64), (1000, 256, 3000)])
def test_row_blocks_out_at_once_are_bounded(units, tmp_path, producers, block_rows, max_blocks):
    """A producer that never hands a block back is made to wait once `row_blocks_max` are out:
    the heap holds at most row_blocks_max x row_block_rows rows, however long the phase."""
    got = _run(units, "bounded", str(tmp_path), str(producers))
    assert got["state"] == "WAITING"
    assert int(got["taken"]) == int(got["row_blocks_peak"]) == max_blocks
    assert int(got["row_block_rows"]) == block_rows and int(got["row_blocks_max"]) == max_blocks
    assert max_blocks * block_rows * 67 < 60e6  # 67 bytes a row: the bound in bytes


def test_a_mix_is_drawn_by_weight_and_rendered_the_same_for_the_same_seed(units, tmp_path):
    """Mix (the RMI driver's requests): call n is drawn by weight and its {seq} and {uuid}s
    rendered from the seed and n, so one seed gives the same calls with the same bytes."""
    import json
    import re

    def calls(seed: int) -> list[list[str]]:
        spec = tmp_path / f"spec-{seed}.json"
        mix = [
            {"name": "get", "weight": 3.0, "method": "GET", "target": "/db?query=range"},
            {"name": "off", "weight": 0.0, "method": "GET", "target": "/health"},
            {
                "name": "add",
                "weight": 1.0,
                "method": "POST",
                "target": "/register",
                "body": "user={uuid}&pass={uuid}&n={seq}",
            },
        ]
        spec.write_text(json.dumps({"seed": seed, "requests": mix}))
        proc = subprocess.run(
            [*units, "mix", str(spec), "4000"], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return [line.split(" ", 3) for line in proc.stdout.splitlines()]

    a, b, other = calls(7), calls(7), calls(8)
    assert a == b and a != other
    kinds = [int(c[0]) for c in a]
    assert 1 not in kinds  # weight 0: never drawn
    share = kinds.count(2) / len(kinds)
    assert abs(share - 0.25) < 4.5 * (0.25 * 0.75 / len(kinds)) ** 0.5, share
    uuid = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    bodies = [(n, c[3]) for n, c in enumerate(a) if c[0] == "2"]
    for n, body in bodies:
        m = re.fullmatch(f"user=({uuid})&pass=({uuid})&n=(\\d+)", body)
        assert m and m.group(1) != m.group(2) and int(m.group(3)) == n, body
    assert len({body for _, body in bodies}) == len(bodies)
    assert all(c[1:3] == ["GET", "/db?query=range"] for c in a if c[0] == "0")
