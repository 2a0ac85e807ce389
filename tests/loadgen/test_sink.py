"""ParquetSink writes the request rows as they were: every column's values and types, NaN
kept as a value, the `extra` columns, and the rows a `sample:F` keeps. Its pyarrow arrays
share the numpy columns' memory (sink._column) and never load pandas: pa.array() would, and
that import was ~0.35 s of every trial's start-up."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.records import COLUMNS
from loadgen.sink import ParquetSink

ROOT = Path(__file__).resolve().parents[2]


def _columns(n: int, rng) -> dict[str, np.ndarray]:
    cols = {}
    for name, t in COLUMNS.items():
        dt = np.dtype(t)
        if dt.kind == "f":
            v = rng.normal(5, 3, n).astype(dt)
            v[rng.random(n) < 0.2] = np.nan
        else:
            info = np.iinfo(dt)
            v = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        cols[name] = v
    return cols


def test_the_file_holds_every_value_and_type_as_pa_array_would(tmp_path):
    rng = np.random.default_rng(3)
    cols = _columns(10_000, rng)
    # a strided view too: the sink must not read it as if it were contiguous
    cols["conn"] = np.ascontiguousarray(np.repeat(cols["conn"], 2))[::2]
    path = tmp_path / "r.parquet"
    sink = ParquetSink(path, extra={"shard": 3})
    for i in range(0, 10_000, 3_000):
        sink({k: v[i : i + 3_000] for k, v in cols.items()})
    sink.finish()
    got = pq.read_table(path)
    want = pa.table({k: pa.array(v) for k, v in cols.items()})
    for name in COLUMNS:
        assert got.schema.field(name).type == want.schema.field(name).type, name
        a, b = got.column(name).to_numpy(), want.column(name).to_numpy()
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
    assert got.column("conn").null_count == 0 and got.column("svc_ms").null_count == 0
    assert np.isnan(got.column("svc_ms").to_numpy()).sum() == np.isnan(cols["svc_ms"]).sum()
    assert set(got.column("shard").to_pylist()) == {3}
    assert got.schema.field("shard").type == pa.int16()


def test_a_sample_keeps_its_rows_intact(tmp_path):
    rng = np.random.default_rng(4)
    cols = _columns(20_000, rng)
    cols["intended_ns"] = np.arange(20_000, dtype=np.int64)  # names each row
    path = tmp_path / "s.parquet"
    sink = ParquetSink(path, keep=0.25, seed=9)
    sink(cols)
    sink.finish()
    got = pq.read_table(path)
    rows = got.column("intended_ns").to_numpy()
    assert 4_000 < len(rows) < 6_000 and (np.diff(rows) > 0).all()
    for name in ("sent_ns", "status", "queue_ms"):
        a, b = got.column(name).to_numpy(), cols[name][rows]
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name


def test_a_sink_writing_rows_loads_no_pandas(tmp_path):
    code = (
        "import sys, numpy as np\n"
        "from loadgen.records import COLUMNS\n"
        "from loadgen.sink import ParquetSink\n"
        f"s = ParquetSink(__import__('pathlib').Path({str(tmp_path / 'p.parquet')!r}))\n"
        "s({k: np.zeros(100, dtype=t) for k, t in COLUMNS.items()}); s.finish()\n"
        "import json; print(json.dumps('pandas' in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is False
    assert pq.ParquetFile(tmp_path / "p.parquet").metadata.num_rows == 100
