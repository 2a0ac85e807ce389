"""`perfctl load URL --workload FILE`: an experiment's workload block (a mix, generated fields,
headers; CSV paths relative to the file) against one URL, with a row per endpoint; bad files
are exit 2 and one paragraph naming the file and the key."""

import json
import os
import time
from pathlib import Path

import pytest
from cli_kit import perfctl

from orchestrator.proc import ports, process
from orchestrator.run import bundled

ROOT = Path(__file__).resolve().parents[2]

MIX = """\
workload:
  headers: {X-Client: "perfctl-test"}
  requests:
    - {name: light, weight: 3, path: "/work?spin_us={int:1..5}"}
    - {name: heavy, weight: 1, path: "/work?spin_us=200&u={file:users.csv:name}"}
"""


# every test here uses a server the module starts
# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]


@pytest.fixture(scope="module")
def url():
    port = ports.free_port()
    proc = process.spawn(bundled.command("python", "async", port))
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the server exited"
            try:
                with __import__("socket").create_connection(("127.0.0.1", port), 0.2):
                    break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/"
    finally:
        process.terminate(proc)


def _files(tmp_path: Path) -> Path:
    d = tmp_path / "w"
    d.mkdir()
    (d / "users.csv").write_text("name\nada\nbob\n")
    (d / "mix.yaml").write_text(MIX)
    return d


def test_a_mix_from_a_file_with_a_row_per_endpoint(url, tmp_path):
    d = _files(tmp_path)
    # run from elsewhere with a relative path: the CSV is found beside the workload file
    r = perfctl(
        "load",
        url,
        "-c",
        "4",
        "-d",
        "1s",
        "--warmup",
        "200ms",
        "--json",
        "--workload",
        os.path.relpath(d / "mix.yaml", tmp_path),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.splitlines()[-1])
    ends = {e["endpoint"]: e for e in res["endpoints"]}
    assert set(ends) == {"light", "heavy"} and res["errors"] == 0
    assert sum(e["requests"] for e in ends.values()) == res["requests"]
    # 3:1 by weight; the heavy one (200 us of work) is the slower one
    assert 0.65 < ends["light"]["share"] < 0.85
    assert ends["heavy"]["latency_p50_ms"] > ends["light"]["latency_p50_ms"]
    text = perfctl(
        "load",
        url,
        "-c",
        "2",
        "-d",
        "500ms",
        "--warmup",
        "100ms",
        "--workload",
        str(d / "mix.yaml"),
    )
    assert text.returncode == 0 and "light" in text.stdout and "heavy" in text.stdout


@pytest.mark.parametrize(
    "content, flags, words",
    [
        (None, [], ["missing.yaml", "cannot read it"]),
        ("workload: [1, 2", [], ["not valid YAML"]),
        ("workload: {requests: [{name: a, wieght: 2}]}", [], ["workload.requests", "wieght"]),
        ("workload: {path: /x}", ["--method", "POST"], ["--method and --body"]),
        ("workload: {path: '/x?u={file:nope.csv:name}'}", [], ["nope.csv", "workload.path"]),
    ],
)
def test_bad_workload_files_are_exit_2_with_one_paragraph(url, tmp_path, content, flags, words):
    f = tmp_path / ("missing.yaml" if content is None else "bad.yaml")
    if content is not None:
        f.write_text(content)
    r = perfctl("load", url, "-d", "1s", "--workload", str(f), *flags)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "Fix:" in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
