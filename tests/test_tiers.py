"""The suite's tiers are marked by rule (tests/conftest.py): a test's folder and fixtures give
its tier, and a unit-tier test that starts a server, a proxy or a trial fails, naming the
`live` fixture, in this process (subprocess guarded) and in any perfctl it starts
(PERFCTL_NO_SPAWN)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import PerfctlError
from orchestrator.proc import process

TESTS = Path(__file__).resolve().parent


def _root_conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", TESTS / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


conftest = _root_conftest()


def test_a_tests_folder_and_fixtures_give_its_tier():
    tier = conftest.tier_of
    assert tier(TESTS / "studies" / "test_x.py", ["tmp_path"]) == "study"
    assert tier(TESTS / "conformance" / "test_x.py", []) == "live"
    assert tier(TESTS / "models" / "test_x.py", ["tmp_path"]) == "unit"
    assert tier(TESTS / "models" / "test_x.py", ["tmp_path", "live"]) == "live"
    assert tier(TESTS / "analysis" / "test_x.py", ["small_run"]) == "live"
    assert tier(TESTS / "test_x.py", ["run_proxy"]) == "live"


def test_this_test_is_marked_unit_and_every_collected_test_has_one_tier(request):
    assert request.node.get_closest_marker("unit") is not None
    for item in request.session.items:
        assert sum(item.get_closest_marker(t) is not None for t in conftest.TIERS) == 1, item


def test_a_unit_test_may_start_perfctl_and_python_tools_but_not_a_server():
    ok = conftest.unit_may_start
    py = sys.executable
    assert ok([py, "-m", "orchestrator.cli", "check", "run"])
    assert ok([py, "-m", "pytest", "-q"]) and ok([py, "-c", "print(1)"])
    assert ok(["/sbin/ldconfig", "-p"]) and ok(["git", "init"])
    assert not ok([py, "-m", "http.server"])
    assert not ok([py, "servers/reference/mmc_server.py", "--port", "0"])
    assert not ok(["servers/c/build/perfctl-server", "--port", "0"])
    assert not ok(["taskset", "-c", "1", py, "-c", "pass"])
    assert not ok(["java", "-jar", "x.jar"])


def test_a_unit_test_that_starts_a_server_fails_naming_the_live_fixture():
    with pytest.raises(pytest.fail.Exception, match="is live. Fix: give it the `live` fixture"):
        subprocess.Popen([sys.executable, "-m", "http.server", "0"])


def test_perfctl_in_the_unit_tier_starts_no_process(tmp_path):
    with pytest.raises(PerfctlError, match="PERFCTL_NO_SPAWN.*'sleep'"):
        process.spawn(["sleep", "5"], log_path=tmp_path / "log")
    assert not process.CHILDREN


class _Item:
    """What pytest_collection_modifyitems reads of a collected test."""

    def __init__(self, path: Path, marks: set[str], fixturenames=("tmp_path",)):
        self.path, self.fixturenames, self.nodeid = path, list(fixturenames), f"{path.name}::t"
        self.marks = set(marks)
        self.function = lambda: None
        self.function.__doc__ = "Needs quiet: a quiet host."
        self.module = None

    def get_closest_marker(self, name):
        return name if name in self.marks else None

    def add_marker(self, name):
        self.marks.add(name)


def test_the_protocol_folders_are_untimed_and_untimed_excludes_needs_quiet():
    protocol = _Item(TESTS / "conformance" / "test_x.py", set())
    e2e = _Item(TESTS / "e2e" / "test_x.py", set())
    conftest.pytest_collection_modifyitems(None, [protocol, e2e])
    assert protocol.marks == {"live", "untimed"} and e2e.marks == {"live"}
    both = _Item(TESTS / "e2e" / "test_x.py", {"untimed", "needs_quiet"})
    with pytest.raises(pytest.UsageError, match="both needs_quiet and untimed"):
        conftest.pytest_collection_modifyitems(None, [both])


def test_no_collected_untimed_test_needs_quiet(request):
    for item in request.session.items:
        assert not (item.get_closest_marker("untimed") and item.get_closest_marker("needs_quiet"))
