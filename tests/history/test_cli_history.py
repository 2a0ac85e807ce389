"""`perfctl history check | show | import` through the CLI's entry point (main(), in this
process: a fresh interpreter per command would cost seconds each; one test runs the console
script): check's exit codes 0 (flat), 1 (the newest runs after a regression), 3 (too few
runs; a fresh slowdown too short to confirm) and 2 (a bad store), each with its paragraph;
show's table and figure; import's backfill, once per run."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from history_kit import fill, levels, run_dir

from orchestrator.cli.main import main as cli_main
from orchestrator.history.store import Location, Store

PERFCTL = str(Path(sys.executable).parent / "perfctl")


@pytest.fixture
def perfctl(monkeypatch, capsys):
    """perfctl(*args): run the command as the console script does; its exit code and output."""
    monkeypatch.delenv("PERFCTL_HISTORY_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "160")

    def run(*args, env=None):
        monkeypatch.setattr(sys, "argv", ["perfctl", *map(str, args)])
        try:
            cli_main()
            code = 0
        except SystemExit as e:
            code = e.code or 0
        out = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)

    return run


@pytest.fixture
def env():
    return None


def test_check_passes_a_flat_series(tmp_path, env, perfctl):
    store = fill(tmp_path / "h.sqlite", levels(30, seed=1))
    p = perfctl("history", "check", "--store", store.target, "--metric", "throughput", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok: experiment kit, cell cell=c1, metric throughput: no regression" in p.stdout


def test_check_fails_when_the_newest_runs_sit_after_a_regression(tmp_path, env, perfctl):
    store = fill(tmp_path / "h.sqlite", levels(30, step_at=22, step=-0.10, seed=2))
    p = perfctl("history", "check", "--store", store.target, env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    out = " ".join(p.stdout.split())
    assert "regression: experiment kit, cell cell=c1, metric throughput: a regression of -1" in out
    assert "commits 00021ccccccc..00022ccccccc" in out  # the commit range of runs 21 -> 22


def test_an_improvement_is_no_regression(tmp_path, env, perfctl):
    store = fill(tmp_path / "h.sqlite", levels(30, step_at=22, step=+0.10, seed=2))
    p = perfctl("history", "check", "--store", store.target, "--metric", "throughput", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "its latest change point, +" in " ".join(p.stdout.split())


@pytest.mark.parametrize(
    "runs, needle",
    [
        (levels(4, seed=3), "only 4 usable run(s)"),
        (levels(29, seed=3) + levels(2, seed=4, step_at=0, step=-0.2), "the newest 2 run(s)"),
    ],
    ids=["few-runs", "fresh-slowdown"],
)
def test_check_says_too_thin(tmp_path, env, runs, needle, perfctl):
    store = fill(tmp_path / "h.sqlite", runs)
    p = perfctl("history", "check", "--store", store.target, "--metric", "throughput", env=env)
    assert p.returncode == 3, p.stdout + p.stderr
    assert needle in " ".join(p.stdout.split())


def test_check_on_a_bad_store_is_exit_2_and_one_paragraph(
    tmp_path, perfctl, perfctl_env, assert_clean_error
):
    bad = tmp_path / "h.sqlite"
    bad.write_bytes(b"garbage " * 100)
    script = subprocess.run(
        [PERFCTL, "history", "check", "--store", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env=perfctl_env,
    )
    assert_clean_error(script, "is corrupt")
    assert_clean_error(
        perfctl("history", "check", "--store", tmp_path / "none.sqlite", env=env),
        "does not exist",
    )
    store = fill(tmp_path / "ok.sqlite", levels(8, seed=1))
    assert_clean_error(
        perfctl("history", "check", "nosuch", "--store", store.target, env=env),
        "no valid, quiet trials of experiment 'nosuch' (it holds runs of kit)",
    )
    assert_clean_error(
        perfctl("history", "check", "--metric", "p42", "--store", store.target, env=env),
        "--metric p42",
    )


def test_show_prints_the_change_points_and_draws_the_figure(tmp_path, env, perfctl):
    store = fill(tmp_path / "h.sqlite", levels(30, step_at=15, step=0.2, seed=5))
    png = tmp_path / "fig.png"
    p = perfctl("history", "show", "kit", "--store", store.target, "--png", png, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "+20" in out or "+19" in out or "+21" in out, out
    assert "at run 16" in out and png.stat().st_size > 10_000


def test_import_backfills_each_run_once(tmp_path, env, perfctl):
    a = run_dir(tmp_path / "results/kit/a", started="2026-01-01T00:00:00+0000")
    b = run_dir(tmp_path / "results/kit/b", started="2026-01-02T00:00:00+0000", commit="def")
    (tmp_path / "results/latest").symlink_to("kit/b")
    (tmp_path / "results/kit/empty").mkdir()
    store = tmp_path / "h.sqlite"
    args = ("history", "import", a, b, tmp_path / "results/latest", tmp_path / "results/kit/empty")
    p = perfctl(*args, "--store", store, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 run(s) added, 0 already there, 1 director(ies) without run.json" in p.stdout
    p = perfctl(*args, "--store", store, env=env)
    assert "0 run(s) added, 2 already there" in p.stdout
    with Store(Location(str(store), "test"), create=False) as st:
        runs = st.runs()
        assert [r["commit_sha"] for r in runs] == ["abc", "def"]
        assert runs[0]["labels"] == {"branch": "main"}
        assert len(st.trials()) == 6


def test_import_takes_directories_holding_runs(tmp_path, perfctl):
    run_dir(tmp_path / "results/kit/a", started="2026-01-01T00:00:00+0000")
    run_dir(tmp_path / "results/other/b", started="2026-01-02T00:00:00+0000", experiment="other")
    store = tmp_path / "h.sqlite"
    p = perfctl(
        "history", "import", tmp_path / "results/kit", tmp_path / "results", "--store", store
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 run(s) added, 0 already there" in p.stdout


def test_check_names_the_hosts_calibration_when_the_run_has_one(tmp_path, perfctl):
    from history_kit import HOST, record

    store = Location(str(tmp_path / "h.sqlite"), "test")
    calib = {
        "created": "2026-11-26T10:00:00+0000",
        "metrics": {"throughput_rps": {"trial_cv": 0.021, "run_cv": 0.034}},
    }
    with Store(store) as st:
        for k, values in enumerate(levels(10, seed=1)):
            r = record(k, list(values))
            r.host = {**HOST, "calibration": calib}
            st.add(r)
    p = perfctl("history", "check", "--store", store.target, "--metric", "throughput")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "calibration (2026-11-26T10:00:00+0000) puts A/A runs 3.4% apart and trials 2.1%" in (
        " ".join(p.stdout.split())
    )
