"""`services:` and `{services.NAME.FIELD}`: every mistake is refused before anything runs,
naming the key and the fix (experiment/services.py)."""

from __future__ import annotations

import pytest

from orchestrator import experiment
from orchestrator.errors import PerfctlError
from orchestrator.experiment import catalogue, matrix
from orchestrator.experiment.cells import server_dump
from orchestrator.experiment.services import fill

BASE = """
name: svc
services:
  db: {kind: postgresql, scope: SCOPE, data: {participants: 500}}
servers:
  py: {impl: python, model: pool, db: "DSN"}
workload: {path: /db, params: {query: point}}
load: {mode: closed, connections: 2, duration: 1s, warmup: 0.2s}
"""


def _plan(write_yaml, scope="run", dsn="{services.db.dsn}", extra=""):
    return experiment.load_plan(
        write_yaml(BASE.replace("SCOPE", scope).replace("DSN", dsn) + extra)
    )


def test_a_service_compiles_and_keeps_its_placeholder_for_start_time(write_yaml):
    plan = _plan(write_yaml)
    db = plan.services["db"]
    assert (db.kind, db.scope, db.data.participants) == ("postgresql", "run", 500)
    (cell,) = plan.cells
    assert cell.server.db == "{services.db.dsn}"


def test_the_cell_id_of_a_server_without_db_is_what_it_was_before_db_existed(write_yaml):
    text = "name: x\nservers: {py: {impl: python}}\nload: {duration: 1s}\n"
    (cell,) = experiment.load_plan(write_yaml(text)).cells
    assert cell.server.db is None and "db" not in server_dump(cell.server)
    assert cell.cell_id == matrix.cell_id(
        {
            "values": cell.values,
            "server": server_dump(cell.server),
            "workload": cell.workload.model_dump(),
            "load": cell.load.model_dump(),
            "network": {},
            "placement": cell.placement.model_dump(),
        }
    )


@pytest.mark.parametrize(
    "dsn, words",
    [
        ("{services.cache.dsn}", ["{services.cache.dsn}", "names no service", "use one of: db"]),
        ("{services.db.url}", ["has no field 'url'", "dsn, host, port, user, password"]),
        ("{service.db.dsn}", ["{service.db.dsn}", "is not a service placeholder"]),
    ],
)
def test_a_bad_service_placeholder_names_the_server_and_the_fix(write_yaml, dsn, words):
    with pytest.raises(PerfctlError) as e:
        _plan(write_yaml, dsn=dsn)
    msg = str(e.value)
    assert "servers.py" in msg and "Fix:" in msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize(
    "change, words",
    [
        ("kind: postgresql", "kind: mysql"),
        ("scope: run", "scope: cell"),
        ("participants: 500", "participants: 0"),
        ("participants: 500", 'participants: "{n}"'),
    ],
)
def test_a_bad_service_entry_names_its_key(write_yaml, change, words):
    text = BASE.replace("SCOPE", "run").replace("DSN", "{services.db.dsn}").replace(change, words)
    with pytest.raises(PerfctlError) as e:
        experiment.load_plan(write_yaml(text + "matrix: {n: [1]}\n"))
    assert "services.db" in str(e.value) and "Fix:" in str(e.value)


@pytest.mark.parametrize("model", ["pool", "thread", "single", "rmi", "rmi-single", "servlet"])
def test_every_java_model_takes_db(write_yaml, model):
    """/db is in every Java server (one JDBC class: the plain models, RMI and the stacks)."""
    text = (
        BASE.replace("SCOPE", "run")
        .replace("DSN", "{services.db.dsn}")
        .replace("impl: python, model: pool", f"impl: java, model: {model}")
    )
    if model.startswith("rmi"):
        text = text.replace("\nload: {", "\nload: {driver: rmi, ")
    (cell,) = experiment.load_plan(write_yaml(text)).cells
    assert cell.server.db == "{services.db.dsn}"


def test_db_on_a_server_without_a_db_endpoint_is_refused(write_yaml, monkeypatch):
    # every bundled server has /db now; the check stays for one that has not (a new impl)
    monkeypatch.setitem(catalogue.DB_MODELS, "java", ("servlet", "spring"))
    text = (
        BASE.replace("SCOPE", "run")
        .replace("DSN", "{services.db.dsn}")
        .replace("impl: python, model: pool", "impl: java, model: pool")
    )
    with pytest.raises(PerfctlError) as e:
        experiment.load_plan(write_yaml(text))
    assert "servers.py" in str(e.value) and "no /db endpoint" in str(e.value)
    assert "impl java (models servlet, spring)" in str(e.value)


def test_fill_replaces_only_running_services():
    text = "x {services.db.dsn} {services.db.port} {services.other.host} {port}"
    got = fill(text, {"db": {"dsn": "postgresql://u@127.0.0.1:5/d", "port": "5"}})
    assert got == "x postgresql://u@127.0.0.1:5/d 5 {services.other.host} {port}"


def test_db_pool_sizes_the_pool_where_a_server_has_one_and_is_refused_elsewhere(write_yaml):
    """db_pool: `--db-pool N` for the Java models and python async (a pool apart from the
    threads); the servers with a connection per worker thread, or no `db:`, refuse it by name."""
    from orchestrator.run import bundled

    text = BASE.replace("SCOPE", "run").replace("DSN", "{services.db.dsn}")
    java = text.replace(
        "impl: python, model: pool, db:", "impl: java, model: rmi, threads: 16, db_pool: 4, db:"
    )
    (cell,) = experiment.load_plan(
        write_yaml(java.replace("\nload: {", "\nload: {driver: rmi, "))
    ).cells
    assert cell.server.db_pool == 4
    argv = bundled.command("java", "rmi", 9999, threads=16, db="postgresql://x", db_pool=4)
    assert argv[argv.index("--db-pool") + 1] == "4" and argv[argv.index("--threads") + 1] == "16"
    assert "--db-pool" not in bundled.command("java", "pool", 9999, db="postgresql://x")
    for bad, words in (
        (text.replace("model: pool, db:", "model: pool, db_pool: 2, db:"), "set `threads`"),
        (
            text.replace('model: pool, db: "{services.db.dsn}"', "model: async, db_pool: 2"),
            "give `db:` too",
        ),
    ):
        with pytest.raises(PerfctlError) as e:
            experiment.load_plan(write_yaml(bad))
        assert "db_pool" in str(e.value) and words in str(e.value), str(e.value)
