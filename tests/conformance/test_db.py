"""GET /db (servers/PROTOCOL.md) in every bundled HTTP server that has one: bad parameters are
400, no database is 503 with the reason and a connection that stays usable, and against a real
PostgreSQL (a `postgresql` service, run/postgres.py) point, range, insert and delete answer with the
rows and a Server-Timing `db` entry inside `svc`. (The RMI models' /db: a call to "/db",
tests/run/test_services_postgresql.py.)"""

from __future__ import annotations

import pytest
from conformance_client import Conn, Server, build_error, get, server_argv
from setup_kit import build_failed, require

from orchestrator.experiment.catalogue import CONCURRENCY_MODELS, RMI_MODELS, STACK_MODELS, has_db
from orchestrator.experiment.services import PostgresService
from orchestrator.proc import process
from orchestrator.run.postgres import PostgresRunner, find_pg_bin

DB_MODELS = [
    (i, m)
    for i, models in CONCURRENCY_MODELS.items()
    for m in models
    if has_db(i, m) and m not in RMI_MODELS
]
IDS = [f"{i}-{m}" for i, m in DB_MODELS]
BAD = [
    "/db",
    "/db?query=",
    "/db?query=drop",
    "/db?query=POINT",
    "/db?query=range&rows=0",
    "/db?query=range&rows=1001",
    "/db?query=range&rows=x",
    "/db?query=point&rows=-1",
    "/db?query=range&rows=%zz",
]


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """One PostgreSQL with 300 participants for the module (the service perfctl runs)."""
    require_postgresql()
    runner = PostgresRunner(
        "db", PostgresService(kind="postgresql", data={"participants": 300}), "test_db.py"
    )
    runner.start(tmp_path_factory.mktemp("db"))
    yield runner
    runner.stop()
    process.stop_all()


def require_postgresql() -> None:
    """PostgreSQL's binaries (make setup installs them): missing is a failure."""
    require(find_pg_bin() is not None, "PostgreSQL (initdb, postgres)", "postgresql")


def _server(impl: str, model: str, *extra: str) -> Server:
    if impl == "java":
        # the plain Java models take the PostgreSQL JDBC driver from the stacks build
        err = build_error("java", "servlet")
        if err:
            build_failed("the Java stacks (they bring the JDBC driver jar)", err)
    try:
        return Server(impl, model, server_argv(impl, model) + list(extra), startup_timeout=60)
    except RuntimeError as e:
        pytest.fail(f"{impl}/{model} did not start: {e}")


@pytest.mark.parametrize("impl, model", DB_MODELS, ids=IDS)
def test_bad_db_input_is_400_and_no_database_is_503(impl, model):
    srv = _server(impl, model)
    try:
        for target in BAD:
            r = get(srv.port, target)
            assert r.status == 400, (target, r.status, r.body)
        assert get(srv.port, "/db?query=point", method="POST").status == 405
        with Conn(srv.port) as c:
            r = c.request("/db?query=point")
            assert r.status == 503 and r.body.startswith(b"database unavailable: "), r.body
            if model in STACK_MODELS.get(impl, ()):
                # Tomcat closes the connection after every 503 (no setting changes that)
                assert r.header("connection") == "close"
            else:
                assert r.header("connection") != "close"
                assert c.request("/health").status == 200  # the connection stays usable
        assert srv.alive()
    finally:
        srv.stop()


@pytest.mark.parametrize("impl, model", DB_MODELS, ids=IDS)
def test_db_queries_against_postgresql(impl, model, database):
    srv = _server(impl, model, "--db", database.endpoints["dsn"])
    try:
        with Conn(srv.port) as c:
            for target, rows in (
                ("/db?query=point", 1),
                ("/db?query=range&rows=7", 7),
                ("/db?query=range", 10),
                ("/db?query=insert", 1),
                ("/db?query=delete", 1),  # the oldest registration: there is one, just made
                ("/db?query=point&rows=5", 1),
            ):
                r = c.request(target)
                assert r.status == 200, (target, r.status, r.body)
                assert r.header("content-type").startswith("application/json")
                assert r.json() == {"query": target.split("=")[1].split("&")[0], "rows": rows}
                queue, svc = r.timing
                db = float(r.header("server-timing").rpartition("db;dur=")[2])
                assert 0 < db <= svc + 0.002, r.header("server-timing")
            assert "db;dur=" not in c.request("/health").header("server-timing")
    finally:
        srv.stop()


def test_a_database_that_stops_and_comes_back_is_503_then_200(tmp_path):
    """The reason reaches the client, and the server reconnects by itself (C, Python, Java)."""
    require_postgresql()
    config = PostgresService(kind="postgresql", data={"participants": 50})
    first = PostgresRunner("db", config, "test_db.py")
    first.start(tmp_path / "a")
    servers = [
        _server("python", "pool", "--db", first.endpoints["dsn"]),
        _server("c", "pool", "--db", first.endpoints["dsn"]),
        _server("java", "pool", "--db", first.endpoints["dsn"]),
    ]
    second = None
    try:
        for srv in servers:
            assert get(srv.port, "/db?query=point").status == 200
        port = first.port
        first.stop()
        for srv in servers:
            r = get(srv.port, "/db?query=point")
            assert r.status == 503 and b"database unavailable" in r.body, (srv.impl, r.body)
        second = PostgresRunner("db", config.model_copy(update={"port": port}), "test_db.py")
        second.password = first.password  # the same port and password: the same dsn
        second.start(tmp_path / "b")
        for srv in servers:
            assert get(srv.port, "/db?query=point").status == 200, srv.impl
    finally:
        for srv in servers:
            srv.stop()
        if second is not None:
            second.stop()
        first.stop()
        process.stop_all()
