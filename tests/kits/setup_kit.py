"""What `make setup` provides, as tests ask for it: missing or broken, it fails the test.

Why: a test that skips when its tool is missing also "passes" on a machine where the tool, or
the build that needs it, is broken, and nobody reads the skip lines. `make setup` installs
every Debian package of the Makefile's APT_PACKAGES (gcc, a JDK 17, Maven, PostgreSQL, nginx,
wrk, clang, chromium, ...) and builds the bundled servers, so on a machine where it ran each
of those must be there and must work: `require()`, `require_jdk(17)` and `build()` fail the
test, naming the package and the fix. What make setup does not provide (a JDK >= 21, root, a
kernel module) may still skip, with the reason: `require_jdk(21)` and the callers' own
`pytest.skip`.

Tests import it as `setup_kit` (tests/conftest.py puts tests/ on sys.path).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the JDK version `make setup` installs (openjdk-17-jdk-headless)
SETUP_JDK = 17


def apt_packages() -> set[str]:
    """The Debian packages of the Makefile's APT_PACKAGES (what `make setup` installs)."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^APT_PACKAGES\s*:=\s*((?:.*\\\n)*.*)$", text, re.M)
    assert m, "the Makefile has no APT_PACKAGES line"
    return set(m.group(1).replace("\\\n", " ").split())


def _fail(what: str, package: str, detail: str = "") -> None:
    if package not in apt_packages():
        raise AssertionError(
            f"setup_kit: {package!r} is not in the Makefile's APT_PACKAGES, so a missing "
            f"{what} is not make setup's to provide: skip with the reason instead"
        )
    pytest.fail(
        f"{what} is missing or broken{': ' + detail if detail else ''}. `make setup` installs "
        f"it (Debian package {package}); run `make setup` (as root) and run the tests again.",
        pytrace=False,
    )


def require(ok: bool, what: str, package: str, detail: str = "") -> None:
    """Fail the test unless ok: `what` (a tool of Debian package `package`, which must be in
    the Makefile's APT_PACKAGES) is missing or broken."""
    if not ok:
        _fail(what, package, detail)


def require_tools(*tools: str, package: str) -> None:
    """Fail unless every executable in tools is on PATH (all from Debian package `package`)."""
    missing = [t for t in tools if shutil.which(t) is None]
    require(not missing, " and ".join(missing), package, "not on PATH")


def require_jdk(min_version: int):
    """The newest JDK >= min_version (orchestrator.proc.build.Jdk). None found: a failure for
    the JDK make setup installs (17), a skip with the reason for a newer one."""
    from orchestrator.proc.build import find_jdk, find_jdks

    jdk = find_jdk(min_version)
    if jdk is not None:
        return jdk
    have = ", ".join(f"{j.version} ({j.home})" for j in find_jdks()) or "none"
    if min_version <= SETUP_JDK:
        _fail(f"a JDK >= {min_version}", "openjdk-17-jdk-headless", f"found: {have}")
    pytest.skip(
        f"no JDK >= {min_version} (found: {have}); make setup installs JDK {SETUP_JDK} only. "
        f"Install one under /usr/lib/jvm to run this."
    )


def build(impl: str, **kw) -> None:
    """orchestrator.run.bundled.build(impl, **kw), a failed build failing the test with the
    compiler's last lines (make setup builds every bundled server)."""
    from orchestrator.errors import PerfctlError
    from orchestrator.run import bundled

    try:
        bundled.build(impl, **kw)
    except PerfctlError as e:
        options = ", ".join(f"{k}={v}" for k, v in kw.items())
        build_failed(f"the bundled {impl} server" + (f" ({options})" if options else ""), str(e))


def build_failed(what: str, error: str) -> None:
    """Fail the test: the build of `what` failed with `error` (never a skip)."""
    pytest.fail(
        f"the build of {what} failed, and `make setup` builds it; fix the build (or run "
        f"`make setup`):\n{error}",
        pytrace=False,
    )
