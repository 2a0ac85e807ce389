"""One load phase for the load-generator tests (test_loadgen_modes.py, test_loadgen_servers.py):
`generate` runs it against a server and returns its requests, summary.json and trial row,
having checked that no row claims an answer it did not get (`assert_consistent`) and that the
streamed digest gives the row the rows in memory give (`assert_digest_agrees`)."""

import json

import pandas as pd
import pytest

from loadgen import digest, generate_to_dir, hdr, stats
from loadgen.spec import LoadSpec


def generate(tmp_path, server, path="/work", **kw):
    kw.setdefault("duration_s", 1.5)
    kw.setdefault("warmup_s", 0.3)
    spec = LoadSpec(host="127.0.0.1", port=server.port, target=path, **kw)
    out = tmp_path / f"phase-{len(list(tmp_path.iterdir()))}"
    summary = generate_to_dir(spec, out)
    df = pd.read_parquet(out / "requests.parquet")
    row = stats.summarize(
        {k: df[k].to_numpy() for k in df.columns},
        summary,
        spec.mode,
        target_rate_rps=spec.rate_rps or None,
    )
    assert_consistent(df)
    assert_digest_agrees(out, summary, spec, row)
    return df, summary, row


def assert_digest_agrees(out, summary, spec, row):
    """The digest the load generator streamed, with the exact pass over the file, gives the
    row the rows in memory give; its latency log holds every completion."""
    streamed = stats.summarize_digest(
        digest.read(out / "digest.json"),
        summary,
        spec.mode,
        target_rate_rps=spec.rate_rps or None,
        requests_path=out / "requests.parquet",
    )
    for k, v in row.items():
        w = streamed[k]
        if isinstance(v, str) or isinstance(w, str):
            assert v == w, (k, v, w)
        else:
            assert (v == w) or (v != v and w != w) or v == pytest.approx(w, rel=1e-9), (k, v, w)
    seconds = hdr.read_log(out / "latency.hlog")
    bins = json.loads((out / "digest.json").read_text())["bins"]
    assert [h.get_total_count() for h in seconds] == bins["ok"][: len(seconds)]


def assert_consistent(df):
    """No row may claim success without a completion time, or finish before it was meant."""
    ok = df["error"] == 0
    assert (df.loc[ok, "done_ns"] > 0).all()
    assert (df.loc[ok, "done_ns"] >= df.loc[ok, "intended_ns"]).all()
    assert (df.loc[ok, "done_ns"] >= df.loc[ok, "sent_ns"]).all()
    assert (df.loc[ok, "status"] > 0).all()
    assert ((df["error"] != 0) | (df["sent_ns"] >= df["intended_ns"])).all()
