"""A bounded libFuzzer run (20 s) of the C request parser: no crash, no sanitizer report."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import setup_kit

from .conftest import run_make

C_DIR = Path(__file__).resolve().parents[2] / "servers" / "c"


def test_c_fuzz_http_parser(tmp_path):
    setup_kit.require_tools("clang", package="clang")
    build = run_make(["-s", "fuzz"], timeout=180)
    setup_kit.require(
        not (build.returncode != 0 and "libclang_rt.fuzzer" in build.stderr),
        "the libFuzzer runtime",
        "libclang-rt-14-dev",
        build.stderr[-500:],
    )
    assert build.returncode == 0, build.stdout + build.stderr
    corpus = tmp_path / "corpus"  # libFuzzer adds inputs here, not to the source tree
    shutil.copytree(C_DIR / "fuzz" / "seeds", corpus)
    proc = subprocess.run(
        [
            str(C_DIR / "build" / "fuzz-http-parse"),
            "-max_total_time=20",
            "-timeout=5",
            "-rss_limit_mb=1024",
            f"-dict={C_DIR / 'fuzz' / 'http.dict'}",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    tail = "\n".join(proc.stderr.splitlines()[-25:])
    assert proc.returncode == 0, tail
    assert "Done" in proc.stderr, tail
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("leak-*")), tail
