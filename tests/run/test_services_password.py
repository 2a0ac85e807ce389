"""The PostgreSQL service's credentials (run/postgres.py): scram-sha-256 with a random password per
run, pg_hba letting in user perfctl alone from loopback, the socket in a 0700 directory, and a
run whose files never hold the password."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import setup_kit
from typer.testing import CliRunner

from orchestrator.cli import app as perfctl_app
from orchestrator.experiment.services import PostgresService
from orchestrator.proc import process
from orchestrator.run import postgres as pg
from orchestrator.run.postgres import PostgresRunner, find_pg_bin, split_password

# untimed: asserts what perfctl does, not how fast, so it runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("live"), pytest.mark.untimed]


@pytest.fixture(autouse=True)
def _postgresql_installed():
    setup_kit.require(find_pg_bin() is not None, "PostgreSQL (initdb, postgres)", "postgresql")


def _psql(host: str, port: int, user: str, password: str | None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PGCONNECT_TIMEOUT": "5"}
    if password is not None:
        env["PGPASSWORD"] = password
    return subprocess.run(
        [str(find_pg_bin() / "psql"), "-X", "-w", "-h", host, "-p", str(port), "-U", user]
        + ["-d", "perfctl", "-Atc", "select count(*) from participants"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )


def test_only_perfctl_with_its_password_gets_in(tmp_path):
    runner = PostgresRunner(
        "db", PostgresService(kind="postgresql", data={"participants": 50}), "x"
    )
    other = PostgresRunner("db", PostgresService(kind="postgresql"), "x")
    assert runner.password != other.password and len(runner.password) >= 32
    try:
        runner.start(tmp_path)
        port, pw = runner.port, runner.password
        ok = _psql("127.0.0.1", port, "perfctl", pw)
        assert ok.returncode == 0 and ok.stdout.strip() == "50", ok.stderr
        # socket too, with the password; the socket's directory is private
        sock = runner.sock_dir
        assert stat.S_IMODE(sock.stat().st_mode) == 0o700
        assert _psql(str(sock), port, "perfctl", pw).returncode == 0
        for host, user, password, why in [
            ("127.0.0.1", "perfctl", None, "no password supplied"),
            ("127.0.0.1", "perfctl", "wrong", "password authentication failed"),
            ("127.0.0.1", "postgres", pw, "no pg_hba.conf entry"),
            (str(sock), "perfctl", None, "no password supplied"),
        ]:
            r = _psql(host, port, user, password)
            assert r.returncode != 0 and why in r.stderr, (host, user, r.stderr)
        hba = (runner.data_dir / "pg_hba.conf").read_text()
        assert "trust" not in hba and "scram-sha-256" in hba
        assert not (sock / "pwfile").exists()  # initdb's password file is gone
        # the DSN placeholder carries it, split off for argv
        dsn = runner.endpoints["dsn"]
        assert f"perfctl:{pw}@" in dsn
        assert split_password(dsn) == (f"postgresql://perfctl@127.0.0.1:{port}/perfctl", pw)
    finally:
        runner.stop()
        process.stop_all()
    assert (
        process.redacted(f"--db {dsn}") == f"--db postgresql://perfctl:***@127.0.0.1:{port}/perfctl"
    )


def test_split_password_leaves_a_dsn_without_one_alone():
    assert split_password("postgresql://u@h:1/d") == ("postgresql://u@h:1/d", None)
    assert split_password("postgres://u:p@h/d") == ("postgres://u@h/d", "p")
    assert split_password("host=h password=p") == ("host=h password=p", None)


EXPERIMENT = """
name: db-secret
services:
  db: {kind: postgresql, scope: run, data: {participants: 500}}
servers:
  py: {impl: python, model: async, db: "{services.db.dsn}"}
  c: {impl: c, model: pool, threads: 2, db: "{services.db.dsn}"}
  own:
    cmd: "SERVER --port {port} --model async --threads 2 --db {services.db.dsn}"
workload: {path: /db, params: {query: point}}
load: {mode: closed, connections: 2, duration: 1s, warmup: 0.2s}
matrix: {server: [py, c, own]}
"""


def test_no_file_of_a_run_holds_the_password(write_yaml, tmp_path, monkeypatch):
    """A real `perfctl run` (in-process, to learn the password it made) of bundled servers and of
    a command server whose command line carries the DSN, then `perfctl report`: the servers
    answered /db with the password, and no file of the run, nor the output, holds it."""
    made: list[str] = []

    def remembered() -> str:
        made.append(pg.secrets.token_urlsafe(pg.PASSWORD_BYTES))
        return made[-1]

    monkeypatch.setattr(pg, "new_password", remembered)
    server = Path(__file__).resolve().parents[2] / "servers" / "python" / "server.py"
    text = EXPERIMENT.replace("SERVER", f"{sys.executable} {server}")
    out = tmp_path / "run"
    cli = CliRunner()
    try:
        r = cli.invoke(perfctl_app, ["run", str(write_yaml(text)), "--out", str(out)])
        assert r.exit_code == 0, r.output + repr(r.exception)
        rep = cli.invoke(perfctl_app, ["report", str(out)])
        assert rep.exit_code == 0, rep.output + repr(rep.exception)
    finally:
        process.stop_all()
    (password,) = made
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) == 3 and (trials["errors"] == 0).all(), trials[["server", "errors"]]
    assert (trials["requests"] > 20).all()
    files = [f for f in out.rglob("*") if f.is_file()]
    assert any(f.name == "report.html" for f in files) and any(f.suffix == ".log" for f in files)
    holding = [str(f.relative_to(out)) for f in files if password.encode() in f.read_bytes()]
    assert not holding, holding
    assert password not in r.output + rep.output
