"""loadgen.contract, the boundary check of a driver's output, on files written by hand: each
way a driver can break loadgen/DRIVER.md gives a sentence naming it, and good output in any of
the three formats ends as requests.parquet in the canonical columns."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadgen import contract
from loadgen.records import COLUMNS
from loadgen.spec import LoadSpec

N = 50


def _rows() -> dict[str, np.ndarray]:
    t = 1_000_000_000 + np.arange(N, dtype=np.int64) * 1_000_000
    return {
        "intended_ns": t,
        "sent_ns": t + 10,
        "first_byte_ns": t + 500,
        "done_ns": t + 1000,
        "status": np.full(N, 200),
        "error": np.zeros(N, dtype=int),
    }


def _summary(tmp_path, mode="closed", **over) -> dict:
    s = {
        "start_ns": 900_000_000,
        "measure_start_ns": 1_000_000_000,
        "measure_end_ns": 1_100_000_000,
        "requests_recorded": N,
        "loadgen_cpu_pct": 3.0,
        "loop_lag_p99_ms": 0.1,
        "gc_pause_max_ms": 0.0,
    }
    if mode == "open":
        s.update(
            scheduled_in_window=N,
            dropped=0,
            send_lateness_p50_ms=0.01,
            send_lateness_p99_ms=0.05,
            send_lateness_max_ms=0.1,
        )
    s.update(over)
    (tmp_path / "summary.json").write_text(
        json.dumps({k: v for k, v in s.items() if v is not None})
    )
    return s


@pytest.mark.parametrize("fmt", ["csv", "arrow", "parquet-int32"])
def test_good_output_in_any_format_becomes_canonical_parquet(tmp_path, fmt):
    _summary(tmp_path)
    table = pa.table(_rows())
    if fmt == "csv":
        pd.DataFrame(_rows()).to_csv(tmp_path / "requests.csv", index=False)
    elif fmt == "arrow":
        with pa.ipc.new_stream(tmp_path / "requests.arrow", table.schema) as w:
            w.write_table(table)
    else:
        pq.write_table(
            table.cast(
                pa.schema(
                    [
                        (k, pa.int32() if k == "status" else table.schema.field(k).type)
                        for k in table.column_names
                    ]
                )
            ),
            tmp_path / "requests.parquet",
        )
    assert contract.check_output(tmp_path, "closed") == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.parquet", "summary.json"]
    df = pd.read_parquet(tmp_path / "requests.parquet")
    assert list(df.columns) == list(COLUMNS)
    assert all(df[c].dtype == np.dtype(t) for c, t in COLUMNS.items())
    assert df["svc_ms"].isna().all() and (df["conn"] == -1).all() and (df["bytes"] == 0).all()
    assert (df["done_ns"] == _rows()["done_ns"]).all()


@pytest.mark.parametrize(
    "breakage, needle",
    [
        ("missing", "lacks column(s) done_ns"),
        ("text", "requests.csv is malformed"),
        ("fraction", "requests.csv is malformed"),
        ("error-class", "rows have an `error` outside 0..6"),
        ("order", "answered rows (error 0) break 0 < intended_ns <= sent_ns <= done_ns"),
        ("short", "holds 49 rows but summary.json says requests_recorded = 50"),
        ("empty", "empty values in required columns"),
    ],
)
def test_bad_requests_are_named(tmp_path, breakage, needle):
    _summary(tmp_path)
    df = pd.DataFrame(_rows())
    if breakage == "missing":
        df = df.drop(columns=["done_ns"])
    elif breakage == "text":
        df["sent_ns"] = df["sent_ns"].astype(object)
        df.loc[3, "sent_ns"] = "later"
    elif breakage == "fraction":
        df["done_ns"] = df["done_ns"] + 0.5
    elif breakage == "error-class":
        df.loc[4, "error"] = 9
    elif breakage == "order":
        df.loc[5, "done_ns"] = df.loc[5, "sent_ns"] - 1
    elif breakage == "short":
        df = df.iloc[:-1]
    elif breakage == "empty":
        df["status"] = df["status"].astype(object)
        df.loc[6, "status"] = None
    df.to_csv(tmp_path / "requests.csv", index=False)
    problems = contract.check_output(tmp_path, "closed")
    assert any(needle in p for p in problems), problems
    assert not (tmp_path / "requests.parquet").exists()  # nothing half-converted is left


def test_failed_rows_need_no_answer_times(tmp_path):
    _summary(tmp_path)
    df = pd.DataFrame(_rows())
    df.loc[7, ["sent_ns", "done_ns", "status", "error"]] = [0, 1_200_000_000, 0, 5]  # dropped
    df.to_csv(tmp_path / "requests.csv", index=False)
    assert contract.check_output(tmp_path, "closed") == []


@pytest.mark.parametrize(
    "mode, drop, needle",
    [
        ("closed", "loop_lag_p99_ms", "lacks loop_lag_p99_ms"),
        ("open", "send_lateness_p99_ms", "lacks send_lateness_p99_ms"),
        ("burst", None, "lacks release_spread_ms_max"),
    ],
)
def test_summary_without_its_self_checks_is_named(tmp_path, mode, drop, needle):
    _summary(tmp_path, mode, **({drop: None} if drop else {}))
    pd.DataFrame(_rows()).to_csv(tmp_path / "requests.csv", index=False)
    problems = contract.check_output(tmp_path, mode)
    assert any(needle in p for p in problems), problems


def test_summary_and_requests_missing_or_not_json(tmp_path):
    assert contract.check_output(tmp_path, "closed") == [
        f"no summary.json in {tmp_path}",
        f"no requests file in {tmp_path} (one of requests.parquet, requests.arrow, requests.csv)",
    ]
    (tmp_path / "summary.json").write_text("{not json")
    assert "summary.json is not JSON" in contract.check_output(tmp_path, "closed")[0]
    _summary(tmp_path, start_ns="early")
    assert "start_ns must be numbers" in contract.check_output(tmp_path, "closed")[0]


def test_schedule_file_is_the_http_generators_schedule(tmp_path):
    spec = LoadSpec(mode="open", rate_rps=500, duration_s=2, warmup_s=0.5, seed=42)
    n = contract.write_schedule(spec, tmp_path / contract.SCHEDULE_FILE)
    got = contract.read_schedule(tmp_path / contract.SCHEDULE_FILE)
    assert n == len(got) == 250 + 1000
    assert (np.diff(got) >= 0).all() and got[0] >= 0 and got[-1] < 2.5e9
    assert np.array_equal(got, contract.schedule_offsets_ns(spec))
    assert (tmp_path / contract.SCHEDULE_FILE).stat().st_size == 8 * n
