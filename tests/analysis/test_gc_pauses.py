"""analysis/gc_pauses.py: GC and safepoint pauses from a JFR recording's `jfr print --json`
output (jfr_gc_events.json: three G1 pauses and three safepoints recorded by JDK 17), and a
real recording when the JDK's `jfr` is there."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.analysis.gc_pauses import duration_ms, pauses, trial_pauses

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.untimed

HERE = Path(__file__).parent


def test_jfr_durations_read_as_milliseconds():
    assert duration_ms("PT0.056580694S") == pytest.approx(56.580694)
    assert duration_ms("PT1M2.5S") == pytest.approx(62_500.0)
    assert duration_ms(None) == 0.0 and duration_ms("soon") == 0.0


def test_the_pause_columns_come_from_gc_and_safepoint_events():
    row = pauses(json.loads((HERE / "jfr_gc_events.json").read_text()))
    assert row["server_gc_pauses"] == 3
    assert row["server_gc_pause_max_ms"] == pytest.approx(59.734128)
    assert row["server_gc_pause_total_ms"] == pytest.approx(56.580694 + 59.734128 + 49.279159)


@pytest.mark.skipif(not shutil.which("java") or not shutil.which("jfr"), reason="needs a JDK")
@pytest.mark.usefixtures("live")
def test_a_real_recording_is_read_once_and_kept_beside_it(tmp_path):
    src = tmp_path / "G.java"
    src.write_text(
        "public class G { public static void main(String[] a) { for (int i = 0; i < 3; i++) "
        "{ byte[][] x = new byte[500][]; for (int j = 0; j < 500; j++) x[j] = new byte[10000];"
        " System.gc(); } } }"
    )
    subprocess.run(
        ["java", f"-XX:StartFlightRecording=filename={tmp_path / 'server.jfr'}", str(src)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    row = trial_pauses(tmp_path)
    assert row["server_gc_pauses"] >= 3 and row["server_gc_pause_max_ms"] > 0
    assert json.loads((tmp_path / "gc_pauses.json").read_text()) == row
    assert trial_pauses(tmp_path / "nowhere") is None
