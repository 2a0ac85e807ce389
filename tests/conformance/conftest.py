"""Fixtures of the cross-language conformance suite (servers/PROTOCOL.md).

`server` is session-scoped and parametrized over every bundled impl x model; pytest groups the
tests by it, so one server runs at a time. An impl whose build fails (or whose binary/classes are
missing) fails its tests with the compiler's lines: make setup builds every bundled server, so
a broken build is a broken build, not a skip (only `virtual` without a JDK >= 21 skips).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_client import IMPL_MODELS, Server, server_argv  # noqa: E402


@pytest.fixture(scope="session", params=IMPL_MODELS, ids=[f"{i}-{m}" for i, m in IMPL_MODELS])
def server(request):
    impl, model = request.param
    argv = server_argv(impl, model)
    try:
        srv = Server(impl, model, argv)
    except RuntimeError as e:
        pytest.fail(f"{impl}/{model} did not start: {e}")
    yield srv
    srv.stop()


@pytest.fixture
def srv(server):
    """The session's server for one test: restarted if an earlier test crashed it, and checked
    to be alive after the test (a crash is blamed on the test that caused it)."""
    if not server.alive():
        server.stop()
        server.start()
    yield server
    if not server.alive():
        pytest.fail(
            f"{server.impl}/{server.model} died (exit {server.proc.returncode}); "
            f"stderr: {server.stderr_tail()}"
        )


SHORT_IDLE_TIMEOUT_MS = 500


@pytest.fixture(scope="module", params=IMPL_MODELS, ids=[f"{i}-{m}" for i, m in IMPL_MODELS])
def short_timeout_server(request):
    """A server of every impl x model with --idle-timeout-ms SHORT_IDLE_TIMEOUT_MS, so timeout
    behaviour is checked in make test without waiting the default 10 s. One per impl x model
    for the module (its tests end with the server healthy and no connection of theirs open;
    Spring and Tomcat take seconds to start)."""
    impl, model = request.param
    argv = server_argv(impl, model) + ["--idle-timeout-ms", str(SHORT_IDLE_TIMEOUT_MS)]
    try:
        srv = Server(impl, model, argv)
    except RuntimeError as e:
        pytest.fail(f"{impl}/{model} did not start with --idle-timeout-ms: {e}")
    srv.idle_timeout_s = SHORT_IDLE_TIMEOUT_MS / 1000
    yield srv
    srv.stop()
