"""A `postgresql` service for real (run/services.py, run/postgres.py): /db cells of two languages against one
PostgreSQL that perfctl initdb's, starts, seeds, samples and removes; a database stopped
mid-trial makes the trial invalid with the reason; Ctrl-C and kill -9 of perfctl leave no
postgres process and no data directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import pandas as pd
import psutil
import pytest
import setup_kit
from fault_kit import mark_of, poll_until

from orchestrator import experiment, results
from orchestrator.proc import process
from orchestrator.run import postgres as pg
from orchestrator.run.execute import execute_plan, run_info
from orchestrator.run.postgres import find_pg_bin

pytestmark = pytest.mark.usefixtures("live")


@pytest.fixture(autouse=True)
def _postgresql_installed():
    """PostgreSQL's binaries: make setup installs them, so missing is a failure."""
    setup_kit.require(find_pg_bin() is not None, "PostgreSQL (initdb, postgres)", "postgresql")


EXPERIMENT = """
name: db
services:
  db: {kind: postgresql, scope: SCOPE, data: {participants: 2000}}
servers:
  py: {impl: python, model: async, db: "{services.db.dsn}"}
  c: {impl: c, model: pool, threads: 2, db: "{services.db.dsn}"}
workload: {path: /db, params: {query: "{query}"}}
load: {mode: closed, connections: 2, duration: DURATION, warmup: 0.3s}
matrix: {server: [py, c], query: [point, insert]}
"""


def _experiment(scope: str = "run", duration: str = "1s") -> str:
    return EXPERIMENT.replace("SCOPE", scope).replace("DURATION", duration)


def _postgres_of(pid: int) -> list[psutil.Process]:
    """The postgres processes of perfctl process pid: each postmaster carrying its mark, and the
    postmaster's children (they rewrite their environment area for their process title, so
    only their parent shows the mark)."""
    mark = f"PERFCTL_SUPERVISOR={mark_of(pid)}"
    out = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.info["name"] == "postgres" and mark in "\0".join(
                f"{k}={v}" for k, v in p.environ().items()
            ):
                out += [p, *p.children(recursive=True)]
        except psutil.Error:
            continue
    return list({p.pid: p for p in out}.values())


def _service_dirs(run_dir: Path) -> list[Path]:
    """The data and socket directories services/db.json names, those that still exist."""
    info = json.loads((run_dir / "services" / "db.json").read_text())
    return [Path(info[k]) for k in ("data_dir", "socket_dir") if Path(info[k]).exists()]


def _run_dir(plan, tmp_path: Path) -> Path:
    """A results dir as perfctl run prepares it (its run.json marks it as a run)."""
    run_dir = tmp_path / "run"
    results.prepare(run_dir)
    results.write_json(run_dir / "run.json", run_info(plan, {}))
    return run_dir


@pytest.mark.untimed  # what the cells answer and record, not how fast
def test_db_cells_of_two_languages_against_one_service(write_yaml, tmp_path):
    plan = experiment.load_plan(write_yaml(_experiment()))
    run_dir = _run_dir(plan, tmp_path)
    try:
        outcome = execute_plan(plan, run_dir)
    finally:
        process.stop_all()
    t = outcome.trials
    assert len(t) == 4
    # the servers and the service worked (a busy host may still fault the load generator's
    # own checks, which says nothing about the database path)
    why = t["invalid_reasons"].fillna("")
    assert not why.str.contains("server|service|requests failed|error rate").any(), why.tolist()
    assert (t["errors"] == 0).all() and (t["requests"] > 20).all()
    # the service's CPU and memory are sampled like the server's
    assert (t["service_db_rss_mb"] > 5).all(), t["service_db_rss_mb"].tolist()
    assert t["service_db_cpu_pct"].notna().all()
    for _, row in t.iterrows():
        req = pd.read_parquet(
            run_dir / "cells" / row["cell_id"] / f"trial-{row['trial']}" / "requests.parquet"
        )
        ok = req[req["status"] == 200]
        assert len(ok) > 0.98 * len(req)
        # Server-Timing db;dur= arrives and is part of svc
        assert ok["db_ms"].notna().mean() > 0.9, (row["server"], row["query"])
        both = ok.dropna(subset=["db_ms", "svc_ms"])
        assert (both["db_ms"] <= both["svc_ms"] + 0.002).all()
        assert (both["db_ms"] > 0).mean() > 0.9
    # one service for the whole run, stopped and removed after it; its log is kept
    assert not _service_dirs(run_dir)
    assert "database system is ready" in (run_dir / "services" / "db.log").read_text()
    assert not _postgres_of(os.getpid())


JAVA_EXPERIMENT = """
name: db-java
services:
  db: {kind: postgresql, scope: run, data: {participants: 2000}}
servers:
  jv: {impl: java, model: pool, threads: 2, db: "{services.db.dsn}"}
  rmi: {impl: java, model: rmi, threads: 2, db: "{services.db.dsn}"}
  rmi-nodb: {impl: java, model: rmi, threads: 2}
workload: {path: /db, params: {query: "{query}"}}
load: {driver: "{protocol}", mode: closed, connections: 2, duration: 1s, warmup: 0.3s}
matrix: {server: [jv], protocol: [http], query: [point, range]}
include:
  - {server: rmi, protocol: rmi, query: point}
  - {server: rmi, protocol: rmi, query: insert}
  - {server: rmi, protocol: rmi, query: drop}         # bad input: 400 answers
  - {server: rmi-nodb, protocol: rmi, query: point}   # no database: 503 with the reason
"""


@pytest.mark.untimed  # what the cells answer and record, not how fast
def test_db_cells_of_the_plain_java_server_and_of_rmi(write_yaml, tmp_path):
    """The plain Java HTTP server and the RMI server (driven by the rmi driver) answer /db from
    the same PostgreSQL over JDBC; RMI carries the db time back (db_ms) like Server-Timing."""
    setup_kit.require_jdk(17)
    plan = experiment.load_plan(write_yaml(JAVA_EXPERIMENT))
    run_dir = _run_dir(plan, tmp_path)
    try:
        outcome = execute_plan(plan, run_dir)
    finally:
        process.stop_all()
    t = outcome.trials.set_index(["server", "query"])
    assert len(t) == 6
    good = t.loc[[("jv", "point"), ("jv", "range"), ("rmi", "point"), ("rmi", "insert")]]
    why = good["invalid_reasons"].fillna("")
    assert not why.str.contains("server|service|requests failed|error rate").any(), why.tolist()
    assert (good["errors"] == 0).all() and (good["requests"] > 20).all()
    assert (
        good["service_db_cpu_pct"].notna().all()
    )  # sampled (a 1 s point-query trial may round to 0)

    def requests(server, query):
        row = t.loc[(server, query)]
        return pd.read_parquet(
            run_dir / "cells" / row["cell_id"] / f"trial-{row['trial']}" / "requests.parquet"
        )

    for key in good.index:
        req = requests(*key)
        ok = req[req["status"] == 200]
        assert len(ok) > 0.98 * len(req), key
        assert ok["db_ms"].notna().mean() > 0.9, key
        both = ok.dropna(subset=["db_ms", "svc_ms"])
        assert (both["db_ms"] <= both["svc_ms"] + 0.002).all(), key
        assert (both["db_ms"] > 0).mean() > 0.9, key
    # RMI bad input: every call answered 400, no db time; no database: 503, the reason logged
    bad = requests("rmi", "drop")
    assert len(bad) > 0 and set(bad["status"]) == {400} and bad["db_ms"].isna().all()
    assert t.loc[("rmi", "drop"), "errors"] > 0
    down = t.loc[("rmi-nodb", "point")]
    assert not down["valid"] and down["errors"] > 0
    assert set(requests("rmi-nodb", "point")["status"]) == {503}
    log = run_dir / "cells" / down["cell_id"] / f"trial-{down['trial']}" / "loadgen.log"
    assert "/db answered 503: database unavailable: no database configured" in log.read_text()
    assert not _postgres_of(os.getpid())


@pytest.mark.untimed  # what the cells answer and record, not how fast
def test_database_stopped_mid_trial_makes_the_trial_invalid_with_the_reason(
    write_yaml, tmp_path, monkeypatch
):
    made = []  # the service's password: _commits logs in with it
    monkeypatch.setattr(
        pg, "new_password", lambda: made.append(pg.secrets.token_urlsafe()) or made[-1]
    )
    text = _experiment("trial", "3s").replace(
        "matrix: {server: [py, c], query: [point, insert]}", "matrix: {server: [c], query: [point]}"
    )
    plan = experiment.load_plan(write_yaml(text))
    run_dir = _run_dir(plan, tmp_path)
    stopped = []

    def stop_the_database():
        spec = poll_until(lambda: next(run_dir.glob("cells/*/trial-1/spec.json"), None), 60)
        if spec is None:
            return
        # the load is running: the database has committed queries the server sent it
        tdir = spec.parent
        base = poll_until(lambda: _commits(tdir, made[-1]), 30)
        if base is None or not poll_until(lambda: (_commits(tdir, made[-1]) or 0) >= base + 50, 30):
            return
        for p in _postgres_of(os.getpid()):
            try:
                if p.ppid() == os.getpid():  # the postmaster
                    p.send_signal(signal.SIGINT)  # what pg_ctl stop -m fast does
                    stopped.append(p.pid)
            except psutil.Error:  # a backend that has just ended
                continue

    killer = threading.Thread(target=stop_the_database)
    killer.start()
    try:
        outcome = execute_plan(plan, run_dir)
    finally:
        killer.join()
        process.stop_all()
    assert stopped, "the postmaster was not found"
    (row,) = outcome.trials.to_dict("records")
    assert not row["valid"]
    assert "service db (postgresql) stopped during the trial" in row["invalid_reasons"]
    assert row["errors"] > 0
    req = pd.read_parquet(next(run_dir.glob("cells/*/trial-1/requests.parquet")))
    assert set(req["status"]) >= {200, 503}  # answered before, 503 after the stop
    assert not _service_dirs(next(run_dir.glob("cells/*/trial-1")))  # scope: trial


def _commits(trial_dir: Path, password: str) -> int | None:
    """Transactions PostgreSQL committed in the perfctl database of the trial's service (via
    its socket, with its password), or None before it answers."""
    try:
        info = json.loads((trial_dir / "services" / "db.json").read_text())
        sock = next(
            s for s in Path(info["socket_dir"]).glob(".s.PGSQL.*") if not s.name.endswith(".lock")
        )
    except (OSError, ValueError, StopIteration):
        return None
    r = subprocess.run(
        [
            str(find_pg_bin() / "psql"),
            "-h",
            str(sock.parent),
            "-p",
            sock.name.rsplit(".", 1)[1],
            "-U",
            "perfctl",
            "-d",
            "perfctl",
            "-Atc",
            "select xact_commit from pg_stat_database where datname = 'perfctl'",
        ],
        capture_output=True,
        text=True,
        timeout=10,
        env={**os.environ, "PGPASSWORD": password},
    )
    return int(r.stdout) if r.returncode == 0 and r.stdout.strip().isdigit() else None


def _mid_trial(run_dir: Path, pid: int):
    return (
        list(run_dir.glob("cells/*/trial-1/spec.json"))
        and len(_postgres_of(pid)) >= 2
        and (run_dir / "services" / "db.json").is_file()
    )


# not untimed: a perfctl started beside it would reap what a crashed one left
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "kill9"])
def test_no_postgres_and_no_data_dir_left_after_perfctl_stops(
    write_yaml, tmp_path, start_perfctl, how
):
    out = tmp_path / "run"
    proc = start_perfctl(
        "run", str(write_yaml(_experiment("run", "20s"))), "--out", str(out), "--no-plots"
    )
    assert poll_until(lambda: _mid_trial(out, proc.pid), timeout_s=90), (
        f"no trial got under way: {proc.poll()}"
    )
    dirs = _service_dirs(out)
    assert dirs
    postgres = _postgres_of(proc.pid)
    proc.send_signal(how)
    proc.wait(30)
    if how == signal.SIGINT:
        assert proc.returncode == 130, proc.stderr.read()
    assert poll_until(
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in postgres),
        timeout_s=15,
    ), "postgres outlived it"
    assert poll_until(lambda: not any(d.exists() for d in dirs), timeout_s=15), (
        f"left: {[d for d in dirs if d.exists()]}"
    )
