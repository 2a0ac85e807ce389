"""Shared fixtures: the repo root, the venv's perfctl, tiny experiment files; tests/kits/ on
sys.path for the kits every directory uses (setup_kit: what `make setup` provides, a failure
when missing; signal_kit: waiting for an event under a deadline); and the `needs_quiet`
marker's contract, checked at collection. Only tests/kits/, never tests/ itself: tests/loadgen
and tests/models would shadow the packages of the same names (the editable install finds
them through an import hook that comes after the path)."""

import atexit
import multiprocessing.process
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# `perfctl run` measures the host for 2 s before its first trial; the suite starts hundreds of
# runs, so theirs is 0.2 s (tests/measure/test_hostcheck.py checks the full measurement)
os.environ.setdefault("PERFCTL_HOST_CHECK_S", "0.2")
# tables are as wide in every test process (pytest-xdist's workers have no terminal) as in
# the perfctl children the tests start (cli_kit)
os.environ["COLUMNS"] = "160"
# every finished `perfctl run` is added to a history store: the suite's runs go to one of its
# own, not to results/history.sqlite of the checkout (tests/history/ names stores explicitly)
if "PERFCTL_HISTORY_URL" not in os.environ:
    _HISTORY_DIR = tempfile.mkdtemp(prefix="perfctl-test-history-")
    os.environ["PERFCTL_HISTORY_URL"] = str(Path(_HISTORY_DIR) / "h.sqlite")
    atexit.register(shutil.rmtree, _HISTORY_DIR, ignore_errors=True)  # not left in /tmp
sys.path.insert(0, str(Path(__file__).resolve().parent / "kits"))

NEEDS_QUIET_DOC = "Needs quiet:"
TESTS = Path(__file__).resolve().parent

# The tiers (README "Tests"; `make test` runs unit, then live, then study), marked by rule:
# - study: reproduces a seed study (tests/studies/);
# - live: starts servers or runs trials: every test in a LIVE_DIRS folder, and elsewhere every
#   test that uses a LIVE_FIXTURES fixture (a server, a run, a proxy, or `live` itself);
# - unit: the rest. A unit test runs with PERFCTL_NO_SPAWN set and subprocess.Popen guarded
#   (_guard_unit below): one that starts a server, a proxy, a load generator or a trial fails,
#   naming the `live` fixture, so a new test cannot be mis-tiered by forgetting a mark.
TIERS = ("unit", "live", "study")
STUDY_DIRS = {"studies"}
LIVE_DIRS = {"conformance", "servers_c", "servers_java", "e2e", "cluster", "reference"}
# Within the live tier, `untimed` tests assert nothing that depends on how fast anything ran
# (what a server answers, what a run writes, how perfctl handles a fault or a signal), so
# `make test` runs them three at a time, on both CPUs; every other live test runs alone. Every
# test of PROTOCOL_DIRS is untimed; elsewhere a test (or its module's pytestmark) says so with
# @pytest.mark.untimed (on a unit test it means nothing: unit tests all run two at a time). A
# test both untimed and needs_quiet is refused at collection.
PROTOCOL_DIRS = {"conformance", "servers_c", "servers_java"}
LIVE_FIXTURES = {
    "live",
    # analysis/: real runs
    "small_run",
    "compare_runs",
    # loadgen/: bundled servers, nginx, TLS
    "py_server",
    "c_server",
    "stall_server",
    "odd_server",
    "nginx_server",
    "tls_server",
    # netem/: the proxy and its echo server
    "proxy_bin",
    "echo_port",
    "run_proxy",
    # run/, cluster/: perfctl started as a child that runs trials
    "start_perfctl",
}
# what a unit test may start with subprocess: perfctl itself and Python's tools (the child
# inherits PERFCTL_NO_SPAWN, so it starts nothing either), short Python snippets, and a few
# programs that start nothing (ctypes' library lookup runs ldconfig)
UNIT_PYTHON_MODULES = {"orchestrator.cli", "pytest", "mkdocs"}
UNIT_PROGRAMS = {"ldconfig", "git", "true", str(Path(sys.executable).parent / "perfctl")}


def tier_of(path: Path, fixturenames) -> str:
    """The tier of a test in file path using fixturenames (the rule above)."""
    top = path.resolve().relative_to(TESTS).parts[0]
    if top in STUDY_DIRS:
        return "study"
    if top in LIVE_DIRS or LIVE_FIXTURES & set(fixturenames):
        return "live"
    return "unit"


@pytest.fixture
def live():
    """Declares a test live (it starts servers or runs trials) where its folder and its other
    fixtures do not: `def test_x(live, ...)`, or `pytestmark = pytest.mark.usefixtures("live")`."""


def unit_may_start(args: list[str]) -> bool:
    """Whether a unit-tier test may start argv args (UNIT_PYTHON_MODULES, UNIT_PROGRAMS)."""
    if not args:
        return True
    if args[0] == sys.executable:
        return args[1:2] == ["-c"] or (
            args[1:2] == ["-m"] and args[2:3] != [] and args[2] in UNIT_PYTHON_MODULES
        )
    return args[0] in UNIT_PROGRAMS or Path(args[0]).name in UNIT_PROGRAMS


def _unit_popen_check(argv) -> None:
    args = [str(a) for a in ([argv] if isinstance(argv, (str, bytes)) else list(argv))]
    if unit_may_start(args):
        return
    pytest.fail(
        f"a unit-tier test started {' '.join(args)[:200]!r}: a test that starts servers, "
        "proxies or trials is live. Fix: give it the `live` fixture (or move it to a live "
        "folder, tests/conftest.py LIVE_DIRS).",
        pytrace=False,
    )


def _guard_unit(mp: pytest.MonkeyPatch) -> None:
    """In the unit tier: perfctl, in this process or a child, starts no process
    (PERFCTL_NO_SPAWN); subprocess.Popen starts only what unit_may_start allows; no socket
    listens and no multiprocessing process starts."""
    mp.setenv("PERFCTL_NO_SPAWN", "the test suite's unit tier (tests/conftest.py)")
    real_init = subprocess.Popen.__init__

    def guarded(self, args, *a, **kw):
        _unit_popen_check(args)
        real_init(self, args, *a, **kw)

    def no_listen(self, *a, **kw):
        pytest.fail(
            f"a unit-tier test listened on {self.getsockname()}: a test that starts a server "
            "is live. Fix: give it the `live` fixture.",
            pytrace=False,
        )

    def no_process(self, *a, **kw):
        pytest.fail(
            f"a unit-tier test started a process ({self.name}): a test that runs load "
            "generator workers or servers is live. Fix: give it the `live` fixture.",
            pytrace=False,
        )

    mp.setattr(subprocess.Popen, "__init__", guarded)
    mp.setattr(socket.socket, "listen", no_listen)
    mp.setattr(multiprocessing.process.BaseProcess, "start", no_process)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A unit test runs guarded (_guard_unit) from its set-up to its tear-down, the module and
    session fixtures it sets up included."""
    if item.get_closest_marker("unit") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        _guard_unit(mp)
        yield


def pytest_collection_modifyitems(config, items):
    """Each test is marked with its tier (tier_of). A test marked needs_quiet says in its
    docstring what quiet it needs (a line starting "Needs quiet:"), so the reader of a
    failure knows what the host must give it, and its module retries through quiet_kit."""
    for item in items:
        path = getattr(item, "path", None)
        if path is not None and TESTS in path.resolve().parents:
            item.add_marker(tier_of(path, getattr(item, "fixturenames", ())))
            if path.resolve().relative_to(TESTS).parts[0] in PROTOCOL_DIRS:
                item.add_marker("untimed")
    bare = [
        item.nodeid
        for item in items
        if item.get_closest_marker("needs_quiet")
        and NEEDS_QUIET_DOC not in (getattr(getattr(item, "function", None), "__doc__", "") or "")
    ]
    if bare:
        raise pytest.UsageError(
            f"tests marked needs_quiet without a {NEEDS_QUIET_DOC!r} line in their docstring: "
            + ", ".join(bare)
        )
    timed = [
        item.nodeid
        for item in items
        if item.get_closest_marker("needs_quiet") and item.get_closest_marker("untimed")
    ]
    if timed:
        raise pytest.UsageError(
            "tests marked both needs_quiet and untimed (untimed tests run three at a time; "
            "every test of tests/conftest.py PROTOCOL_DIRS is untimed): "
            + ", ".join(timed)
            + ". Fix: drop the untimed mark, or move the test out of PROTOCOL_DIRS."
        )
    # one kit owns the retries: a needs_quiet test's module takes its attempts from quiet_kit
    unkitted = [
        item.nodeid
        for item in items
        if item.get_closest_marker("needs_quiet")
        and getattr(item, "module", None) is not None
        and "quiet_kit" not in Path(item.module.__file__).read_text()
    ]
    if unkitted:
        raise pytest.UsageError(
            "tests marked needs_quiet whose module does not retry through tests/kits/"
            "quiet_kit.py: " + ", ".join(unkitted)
        )


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "exp.yaml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return write


@pytest.fixture
def perfctl_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["COLUMNS"] = "160"
    return env


@pytest.fixture
def assert_clean_error():
    """assert_clean_error(completed_process, *needles): exit 2, no traceback, every needle in
    the output (the one-paragraph error of docs/running.md "Commands")."""

    def check(proc, *needles: str) -> None:
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out
        assert "Traceback" not in out, out
        for n in needles:
            assert n in out, out

    return check
