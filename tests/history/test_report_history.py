"""The report's History section (orchestrator/analysis/report.py): present when the run is in
its history store, with each series and its change points and the figure; absent when the run
is not there; a broken store is a note, not a failed report."""

from history_kit import run_dir

from orchestrator import results
from orchestrator.analysis import report
from orchestrator.history.add import add_run
from orchestrator.history.store import Location


def _runs(tmp_path, n=12):
    dirs = []
    for k in range(n):
        level = 1000.0 if k < 6 else 800.0
        dirs.append(
            run_dir(
                tmp_path / f"results/kit/run{k:02d}",
                started=f"2026-01-01T00:{k:02d}:00+0000",
                throughputs=(level, level * 1.01, level * 0.99),
                commit=f"{k:02d}" * 20,
            )
        )
    return dirs


def test_a_run_in_the_history_gets_its_section(tmp_path, monkeypatch):
    store = tmp_path / "h.sqlite"
    monkeypatch.setenv("PERFCTL_HISTORY_URL", str(store))
    dirs = _runs(tmp_path)
    for d in dirs:
        add_run(d, Location(str(store), "test"))
    page = report.build(dirs[-1]).read_text()
    assert "<h2>History</h2>" in page
    assert "-20.0% [" in page and "commits 050505050505..060606060606" in page
    assert (dirs[-1] / "plots/history.png").stat().st_size > 10_000


def test_no_section_for_a_run_not_in_the_store_and_a_note_for_a_broken_one(tmp_path, monkeypatch):
    store = tmp_path / "h.sqlite"
    monkeypatch.setenv("PERFCTL_HISTORY_URL", str(store))
    dirs = _runs(tmp_path, 7)
    for d in dirs[:-1]:
        add_run(d, Location(str(store), "test"))
    notes = []
    assert report._history(results.load(dirs[-1]), tmp_path, notes) == "" and notes == []
    assert "<h2>History</h2>" in report._history(results.load(dirs[0]), tmp_path, notes)
    store.write_bytes(b"not a database " * 100)
    assert report._history(results.load(dirs[0]), tmp_path, notes) == ""
    assert any(n.startswith("history: not shown (history store") for n in notes), notes
