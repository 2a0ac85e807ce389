"""The test kits fail where a test used to pass without testing: what `make setup` provides,
missing, fails (setup_kit); an event that never comes fails after its deadline, naming it
(signal_kit); a test marked needs_quiet without its "Needs quiet:" line is refused at
collection (tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import socket
import types
from pathlib import Path

import pytest
import setup_kit
import signal_kit

from orchestrator.errors import PerfctlError

FAILED = pytest.fail.Exception
SKIPPED = pytest.skip.Exception


def test_the_makefile_packages_are_what_make_setup_installs():
    packages = setup_kit.apt_packages()
    for p in ("gcc", "make", "openjdk-17-jdk-headless", "maven", "postgresql", "nginx-light"):
        assert p in packages, packages
    assert "wrk" in packages and "chromium" in packages


def test_a_missing_setup_tool_fails_instead_of_skipping():
    with pytest.raises(FAILED, match=r"nginx is missing or broken.*nginx-light.*make setup"):
        setup_kit.require(False, "nginx", "nginx-light")
    with pytest.raises(FAILED, match="perfctl-no-such-tool"):
        setup_kit.require_tools("perfctl-no-such-tool", package="gcc")
    setup_kit.require(True, "nginx", "nginx-light")  # present: nothing happens


def test_a_tool_make_setup_does_not_install_cannot_be_required():
    with pytest.raises(AssertionError, match="not in the Makefile's APT_PACKAGES"):
        setup_kit.require(False, "a GPU driver", "nvidia-driver")


def test_a_missing_jdk17_fails_and_a_missing_newer_jdk_skips(monkeypatch):
    from orchestrator.proc import build

    monkeypatch.setattr(build, "find_jdk", lambda v: None)
    with pytest.raises(FAILED, match="JDK >= 17.*openjdk-17-jdk-headless"):
        setup_kit.require_jdk(17)
    with pytest.raises(SKIPPED, match="no JDK >= 21"):
        setup_kit.require_jdk(21)


def test_a_failed_build_fails_the_test_with_the_compilers_lines(monkeypatch):
    from orchestrator.run import bundled

    def broken(impl, **kw):
        raise PerfctlError("the bundled c server did not build:\nmodels.c:12: error: oops")

    monkeypatch.setattr(bundled, "build", broken)
    with pytest.raises(FAILED, match="(?s)build of the bundled c server failed.*models.c:12"):
        setup_kit.build("c")


def test_wait_for_fails_naming_what_never_happened():
    with pytest.raises(FAILED, match=r"the flag rising did not happen within 0.05 s.*'low'"):
        signal_kit.wait_for(lambda: False, "the flag rising", 0.05, reading=lambda: "low")
    assert signal_kit.wait_for(lambda: 7, "a number") == 7


@pytest.mark.usefixtures("live")
def test_wait_server_read_waits_for_the_server_to_read_and_fails_if_it_never_does():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        with client, server:
            client.sendall(b"GET /health HTTP/1.1\r\n")
            with pytest.raises(FAILED, match="server_unread_bytes': 22"):
                signal_kit.wait_server_read(client, "the server reading", timeout_s=0.2)
            assert server.recv(100) == b"GET /health HTTP/1.1\r\n"
            signal_kit.wait_server_read(client, "the server reading", timeout_s=5)


def _root_conftest():
    path = Path(__file__).with_name("conftest.py")
    spec = importlib.util.spec_from_file_location("perfctl_tests_root_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _item(doc: str | None):
    def f():
        pass

    f.__doc__ = doc
    return types.SimpleNamespace(
        nodeid=f"t.py::{doc!r}",
        function=f,
        get_closest_marker=lambda name: name == "needs_quiet" or None,
    )


def test_a_needs_quiet_test_must_say_what_quiet_it_needs():
    hook = _root_conftest().pytest_collection_modifyitems
    hook(None, [_item("Checks a gate.\n\n    Needs quiet: valid trials.")])
    for doc in (None, "Checks a gate."):
        with pytest.raises(pytest.UsageError, match="needs_quiet without"):
            hook(None, [_item(doc)])


def test_a_needs_quiet_test_must_retry_through_the_quiet_kit(tmp_path):
    hook = _root_conftest().pytest_collection_modifyitems
    own = tmp_path / "test_own_retry.py"
    own.write_text("for attempt in range(3):\n    pass\n")
    item = _item("Checks a gate.\n\n    Needs quiet: valid trials.")
    item.module = types.SimpleNamespace(__file__=str(own))
    with pytest.raises(pytest.UsageError, match="does not retry through tests/kits/quiet_kit"):
        hook(None, [item])
    own.write_text("import quiet_kit\n")
    hook(None, [item])
