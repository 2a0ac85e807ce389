"""`perfctl report`: a self-contained report.html that a headless Chromium renders cleanly."""

import re
import shutil
import subprocess

import pytest
import setup_kit

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def report_html(small_run, tmp_path_factory):
    from typer.testing import CliRunner

    from orchestrator.cli import app as perfctl_app

    r = CliRunner().invoke(perfctl_app, ["report", str(small_run)])
    assert r.exit_code == 0, r.output
    return small_run / "report.html"


def test_report_is_self_contained(report_html, small_run):
    page = report_html.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|#)""", page)  # nothing external
    assert "@import" not in page and "url(" not in page.replace("data:", "")
    imgs = re.findall(r'<img [^>]*src="data:image/png;base64,', page)
    assert len(imgs) >= 7  # 6 measurement + 2 model figures
    for name in (
        "throughput",
        "latency_percentiles",
        "timeline",
        "latency_spectrum",
        "error_rate",
        "model_latency",
        "usl",
    ):
        assert f'id="fig-{name}"' in page
    assert "Thresholds" in page and "report-small" in page
    assert "run.json" in page and "cpu_count" in page
    assert "valid" in page


def test_report_renders_in_headless_chromium(report_html, tmp_path):
    setup_kit.require(CHROMIUM is not None, "chromium", "chromium")
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
            report_html.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body, proc.stderr[-2000:]
    n = len(re.findall(r"<img ", proc.stdout))
    assert 'data-figures="ok"' in body.group(0), body.group(0)
    assert f'data-figure-count="{n}"' in body.group(0)
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln]
    assert not console, console
