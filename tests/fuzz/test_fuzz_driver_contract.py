"""Fuzzing the driver contract reader (loadgen/contract.check_output) on malformed driver output:
a summary.json of random keys and values (or random bytes), and a requests file (parquet, Arrow
IPC or CSV) of random columns, types and values, whole or cut short. check_output must return
its list of sentences and never raise; output it accepts is requests.parquet in the canonical
columns with as many rows as the summary says; it leaves no temporary file behind.

Budget (fixed, derandomized): EXAMPLES driver outputs. Found and fixed: a value that does not
convert to its canonical type (an `error` of 128 in an int64 column) left
requests.parquet.tmp behind."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen import contract
from loadgen.records import COLUMNS

EXAMPLES = 200
NAMES = [*contract.REQUIRED_COLUMNS, *contract.OPTIONAL_COLUMNS, "extra", ""]
SUMMARY_NAMES = [*contract.SUMMARY_KEYS, *contract.SUMMARY_KEYS_BY_MODE["open"], "records"]

json_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["all", "none", "sample:0.5"]),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def summaries(draw) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=40))
    doc = draw(st.dictionaries(st.sampled_from(SUMMARY_NAMES), json_values, max_size=14))
    if draw(st.booleans()):  # plausible numbers, so the requests file gets read too
        doc.update({k: 0 for k in contract.SUMMARY_KEYS if k not in doc})
    return json.dumps(doc, allow_nan=True).encode()


column = st.sampled_from(["int64", "int8", "uint64", "float64", "string", "bool", "null"])


@st.composite
def tables(draw) -> pa.Table:
    rows = draw(st.integers(0, 20))
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=len(NAMES)))
    if draw(st.booleans()):
        names = list(dict.fromkeys([*contract.REQUIRED_COLUMNS, *names]))
    cols = {}
    for name in names:
        kind = draw(column)
        ints = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=rows, max_size=rows))
        if kind == "string":
            cols[name] = pa.array([str(v) for v in ints])
        elif kind == "bool":
            cols[name] = pa.array([v > 0 for v in ints])
        elif kind == "null":
            cols[name] = pa.nulls(rows)
        elif kind == "float64":
            cols[name] = pa.array(
                draw(st.lists(st.floats(allow_nan=True), min_size=rows, max_size=rows)),
                pa.float64(),
            )
        else:
            info = np.iinfo(kind)
            cols[name] = pa.array(np.clip(ints, info.min, info.max).astype(kind))
    return pa.table(cols) if cols else pa.table({"x": pa.array([], pa.int64())})


def _write(table: pa.Table, fmt: str, path) -> None:
    if fmt == "parquet":
        pq.write_table(table, path)
    elif fmt == "arrow":
        with pa.ipc.new_stream(path, table.schema) as w:
            w.write_table(table)
    else:
        pacsv.write_csv(table, path)


@settings(
    max_examples=EXAMPLES,
    deadline=None,  # file I/O: the host's pace, not the test's
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
@given(
    summary=summaries(),
    table=tables(),
    fmt=st.sampled_from(["parquet", "arrow", "csv"]),
    cut=st.one_of(st.none(), st.floats(0, 1)),
    mode=st.sampled_from(["closed", "open", "burst"]),
)
def test_malformed_driver_output_gives_sentences_never_an_exception(
    tmp_path_factory, summary, table, fmt, cut, mode
):
    out = tmp_path_factory.mktemp("out")
    (out / "summary.json").write_bytes(summary)
    f = out / f"requests.{fmt}"
    _write(table, fmt, f)
    if cut is not None:
        data = f.read_bytes()
        f.write_bytes(data[: int(cut * len(data))])
    problems = contract.check_output(out, mode)
    assert isinstance(problems, list) and all(isinstance(p, str) and p for p in problems)
    assert not list(out.glob("*.tmp")), list(out.iterdir())  # nothing left half-written
    if not problems:
        got = pq.read_table(out / "requests.parquet")
        assert got.schema.names == list(COLUMNS)
        s = json.loads(summary)
        key = "requests_recorded" if s.get("records", "all") == "all" else "records_written"
        assert got.num_rows == s[key]


def test_a_value_that_does_not_convert_leaves_no_half_written_file(tmp_path):
    n = 3
    (tmp_path / "summary.json").write_text(
        json.dumps({k: 0 for k in contract.SUMMARY_KEYS} | {"requests_recorded": n})
    )
    cols = {c: pa.array(np.ones(n, np.int64)) for c in contract.REQUIRED_COLUMNS}
    cols["error"] = pa.array(np.array([0, 0, 128], np.int64))  # int8 in the canonical columns
    pq.write_table(pa.table(cols), tmp_path / "requests.parquet")
    problems = contract.check_output(tmp_path, "closed")
    assert problems and "requests.parquet is malformed" in problems[0], problems
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.parquet", "summary.json"]
