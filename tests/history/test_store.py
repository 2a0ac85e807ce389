"""The history store on SQLite (orchestrator/history/store.py): runs read back as added, the
same run added twice kept once, a store of schema 1 upgraded in place, two processes adding
at once, and every bad store (missing, locked, corrupt, newer schema, unreachable) refused
with one paragraph."""

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from history_kit import levels, record

from orchestrator.errors import PerfctlError
from orchestrator.history import migrations
from orchestrator.history.store import Location, Store, locate

KITS = Path(__file__).resolve().parents[1] / "kits"


def test_a_run_reads_back_as_added_and_adding_it_again_changes_nothing(tmp_path):
    loc = Location(str(tmp_path / "h.sqlite"), "test")
    r = record(1, [1000, 1010, 990], commit="a" * 40)
    with Store(loc) as st:
        first = st.add(r)
        again = st.add(r)
        rows = st.trials()
        runs = st.runs()
    assert first.new_run and first.trials == 3 and first.changed
    assert not again.new_run and again.trials == 0 and not again.changed
    assert [t["throughput_rps"] for t in rows] == [1000, 1010, 990]
    assert rows[0]["commit_sha"] == "a" * 40 and rows[0]["experiment"] == "kit"
    assert len(runs) == 1 and runs[0]["labels"] == {"k": "1"}


def test_a_resumed_run_adds_only_the_trials_the_store_lacks(tmp_path):
    loc = Location(str(tmp_path / "h.sqlite"), "test")
    with Store(loc) as st:
        st.add(record(1, [1000, 1010]))
        more = st.add(record(1, [1000, 1010, 990]))
        assert (more.new_run, more.trials) == (False, 1)
        assert len(st.trials()) == 3


def test_a_store_of_schema_1_is_upgraded_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (1)")
    for sql in migrations.MIGRATIONS[0].statements:
        conn.execute(sql)
    conn.execute(
        "INSERT INTO runs VALUES ('old', 'kit', '2025-01-01T00:00:00Z', 'c0ffee', 'h1', '{}', "
        "'/x', '2025-01-01T00:00:00Z')"
    )
    conn.execute("INSERT INTO trials VALUES ('old', 'c1', 'cell=c1', 1, 500, 1, 2, 0, 1, 1)")
    conn.commit()
    conn.close()
    with Store(Location(str(path), "test")) as st:
        assert st.version() == migrations.LATEST == 2
        assert [t["run_id"] for t in st.trials()] == ["old"]
        st.add(record(2, [1000], commit="d" * 40))  # labels: a table of schema 2
        assert {r["run_id"]: r["labels"] for r in st.runs()}["kit-h1-00002"] == {"k": "2"}


def test_two_processes_adding_at_once_lose_nothing_and_duplicate_nothing(tmp_path):
    """Each process adds 15 runs of its own and the same 15 shared runs, at the same time."""
    path = tmp_path / "h.sqlite"
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(KITS)!r})
        from history_kit import record
        from orchestrator.history.store import Location, Store
        me = int(sys.argv[1])
        with Store(Location({str(path)!r}, "test")) as st:
            for k in range(15):
                st.add(record(100 * me + k, [1.0, 2.0]))
                st.add(record(9000 + k, [3.0, 4.0]))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)]) for i in (1, 2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with Store(Location(str(path), "test")) as st:
        runs = [r["run_id"] for r in st.runs()]
        trials = st.trials()
    assert len(runs) == len(set(runs)) == 45
    assert len(trials) == 90


def test_a_missing_store_is_not_created_by_a_reader(tmp_path):
    path = tmp_path / "none.sqlite"
    with pytest.raises(PerfctlError, match="does not exist.*history import"):
        Store(Location(str(path), "test"), create=False)
    assert not path.exists()


def test_a_corrupt_store_is_refused_with_the_rebuild(tmp_path):
    path = tmp_path / "h.sqlite"
    path.write_bytes(b"this is no database at all, " * 200)
    with pytest.raises(PerfctlError, match=r"is corrupt.*history import") as e:
        Store(Location(str(path), "test"))
    assert "\n" not in str(e.value)


def test_a_store_from_a_newer_perfctl_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "h.sqlite"
    with Store(Location(str(path), "test")):
        pass
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(PerfctlError, match="schema version 99.*up to 2.*upgrade perfctl"):
        Store(Location(str(path), "test"))
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone() == (99,)


def test_a_locked_store_is_refused_after_the_busy_timeout(tmp_path, monkeypatch):
    path = tmp_path / "h.sqlite"
    with Store(Location(str(path), "test")):
        pass
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setenv("PERFCTL_HISTORY_BUSY_S", "0.1")
    try:
        with pytest.raises(PerfctlError, match="is locked.*never lost"):
            with Store(Location(str(path), "test")) as st:
                st.add(record(1, [1.0]))
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_an_unreachable_postgresql_is_refused_with_the_url_redacted(monkeypatch):
    monkeypatch.setenv("PERFCTL_HISTORY_URL", "postgresql://ci:s3cret@127.0.0.1:1/perf")
    loc = locate()
    assert loc.source == "PERFCTL_HISTORY_URL"
    with pytest.raises(PerfctlError, match="cannot be reached") as e:
        Store(loc)
    assert "s3cret" not in str(e.value) and "ci:***@127.0.0.1:1" in str(e.value)


def test_which_store_is_used(tmp_path, monkeypatch):
    from orchestrator.experiment.history import History

    monkeypatch.delenv("PERFCTL_HISTORY_URL", raising=False)
    exp = tmp_path / "sub" / "exp.yaml"
    assert locate(None, History(path="h.sqlite"), exp).target == str(tmp_path / "sub/h.sqlite")
    assert locate("x.sqlite", History(path="h.sqlite"), exp).source == "--store"
    assert locate().target.endswith("results/history.sqlite")
    monkeypatch.setenv("PERFCTL_HISTORY_URL", "postgresql://a@b/c")
    assert locate(None, History(path="h.sqlite"), exp).target == "postgresql://a@b/c"


def test_levels_kit_makes_the_series_it_says():
    runs = levels(10, step_at=5, step=0.5, seed=1, sd_run=0, sd_trial=0)
    assert [round(float(r[0])) for r in runs] == [1000] * 5 + [1500] * 5


def test_the_commit_of_a_git_work_tree_and_a_clear_error_elsewhere(tmp_path):
    from orchestrator.history.record import git_head, parse_labels

    repo = tmp_path / "sut"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert git_head(repo, "exp.yaml") == head.strip()
    with pytest.raises(PerfctlError, match="exp.yaml: key `history.git`.*--commit"):
        git_head(tmp_path / "nothing", "exp.yaml")
    assert parse_labels(["a=1", "b.c=x=y"]) == {"a": "1", "b.c": "x=y"}
    with pytest.raises(PerfctlError, match="--label 'nokey'"):
        parse_labels(["nokey"])
