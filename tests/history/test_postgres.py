"""The history store on a real PostgreSQL, started as perfctl starts a `postgresql` service
(run/postgres.py, through its public start/stop and the DSN it gives): runs read back, the
same run added twice kept once, a schema-1 store upgraded, two processes adding at once, and
a stopped server refused with one paragraph."""

import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest
from history_kit import record
from setup_kit import require

from orchestrator.errors import PerfctlError
from orchestrator.experiment.services import PostgresService
from orchestrator.history import migrations
from orchestrator.history.store import Location, Store
from orchestrator.proc import process
from orchestrator.run.postgres import PostgresRunner, find_pg_bin

KITS = Path(__file__).resolve().parents[1] / "kits"


# every test here uses a server the module starts
# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require(find_pg_bin() is not None, "PostgreSQL (initdb, postgres)", "postgresql")
    runner = PostgresRunner(
        "history", PostgresService(kind="postgresql", data={"participants": 1}), "test_postgres"
    )
    runner.start(tmp_path_factory.mktemp("pg"))
    yield runner
    runner.stop()
    process.stop_all()


@pytest.fixture
def database(server, request):
    """A fresh database of that server for one test: its URL."""
    name = "h_" + request.node.name.split("[")[0][-40:].lower()
    dsn = server.endpoints["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return dsn.rsplit("/", 1)[0] + "/" + name


def test_runs_read_back_and_adding_twice_changes_nothing(database):
    loc = Location(database, "test")
    with Store(loc) as st:
        assert st.add(record(1, [1000, 1010, 990], commit="b" * 40)).changed
        assert not st.add(record(1, [1000, 1010, 990])).changed
        rows = st.trials()
        assert st.version() == migrations.LATEST
        assert st.runs()[0]["labels"] == {"k": "1"}
    assert [r["throughput_rps"] for r in rows] == [1000, 1010, 990]
    assert rows[0]["commit_sha"] == "b" * 40


def test_a_schema_1_store_is_upgraded(database):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (1)")
        for sql in migrations.MIGRATIONS[0].statements:
            conn.execute(sql)
        conn.execute(
            "INSERT INTO runs VALUES ('old', 'kit', '2025-01-01T00:00:00Z', NULL, 'h1', '{}', "
            "'/x', 'now')"
        )
    with Store(Location(database, "test")) as st:
        assert st.version() == 2
        st.add(record(2, [1.0]))
        assert [r["run_id"] for r in st.runs()] == ["old", "kit-h1-00002"]


def test_two_processes_adding_at_once_lose_nothing_and_duplicate_nothing(database):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(KITS)!r})
        from history_kit import record
        from orchestrator.history.store import Location, Store
        me = int(sys.argv[1])
        with Store(Location({database!r}, "test")) as st:
            for k in range(15):
                st.add(record(100 * me + k, [1.0, 2.0]))
                st.add(record(9000 + k, [3.0, 4.0]))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)]) for i in (1, 2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with Store(Location(database, "test")) as st:
        runs = [r["run_id"] for r in st.runs()]
        assert len(runs) == len(set(runs)) == 45
        assert len(st.trials()) == 90


def test_a_server_that_is_down_is_one_paragraph(database, server):
    loc = Location(database.replace(f":{server.port}/", f":{server.port + 1}/"), "test")
    with pytest.raises(PerfctlError, match="cannot be reached.*start that PostgreSQL"):
        Store(loc)
