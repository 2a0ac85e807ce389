"""The one build helper: `make` a target once per change of its sources, under a file lock.

Bundled servers (servers/c, servers/java) and the injection proxy (orchestrator/netem) are
built on demand. A build is skipped when a stamp file holds the hash of every source the
build reads; concurrent perfctl processes (tests, a run beside a benchmark) serialise on a
lock in the build directory, and the second one finds the first one's stamp.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..errors import PerfctlError

# The repository: the bundled servers' sources live under it, and run.json records its commit.
ROOT = Path(__file__).resolve().parents[2]
SOURCE_SUFFIXES = (".c", ".h", ".java", ".py")


def sources_hash(src_dir: Path, suffixes: tuple[str, ...] = SOURCE_SUFFIXES) -> str:
    """A hash of every file under src_dir a build reads (sources by suffix, and Makefiles),
    skipping build/ directories; a change to any of them rebuilds."""
    h = hashlib.sha256()
    for p in sorted(src_dir.rglob("*")):
        if "build" in p.relative_to(src_dir).parts or not p.is_file():
            continue
        if p.suffix in suffixes or p.name == "Makefile":
            h.update(str(p.relative_to(src_dir)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def make_cached(
    src_dir: Path,
    target: str,
    what: str,
    fix: str,
    suffixes: tuple[str, ...] = SOURCE_SUFFIXES,
    timeout_s: float = 600.0,
) -> None:
    """Run `make -B -C src_dir target` unless src_dir/build/.stamp-<target> matches the sources.

    what: how the error names the build ("the bundled c server"); fix: what the user should do.
    Raises PerfctlError with the last 20 lines of make's output when the build fails.
    """
    build_dir = src_dir / "build"
    stamp = build_dir / f".stamp-{target}"
    digest = sources_hash(src_dir, suffixes)
    if stamp.is_file() and stamp.read_text() == digest:
        return
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == digest:  # built while we waited
            return
        try:
            proc = subprocess.run(
                ["make", "-s", "-B", "-C", str(src_dir), target],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except FileNotFoundError:
            raise PerfctlError(
                f"cannot build {what}: `make` is not installed. Fix: apt-get "
                "install make gcc (or run make setup)."
            ) from None
        except subprocess.TimeoutExpired:
            raise PerfctlError(
                f"building {what} took over {timeout_s:.0f} s (make -C "
                f"{src_dir} {target}). Fix: {fix}"
            ) from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise PerfctlError(
                f"building {what} failed (make -C {src_dir} {target}, exit "
                f"{proc.returncode}). Last lines:\n{tail}\nFix: {fix}"
            )
        stamp.write_text(digest)


@dataclass(frozen=True)
class Jdk:
    """A Java installation: `home` has bin/java and bin/javac; `version` is the feature number."""

    home: Path
    version: int

    @property
    def java(self) -> str:
        return str(self.home / "bin" / "java")


def _jdk_version(home: Path) -> int | None:
    release = home / "release"
    if not release.is_file() or not (home / "bin" / "java").exists():
        return None
    m = re.search(r'JAVA_VERSION="(\d+)(?:\.(\d+))?', release.read_text(errors="replace"))
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


@cache
def find_jdks() -> tuple[Jdk, ...]:
    """Every JDK under /usr/lib/jvm and $JAVA_HOME, newest first."""
    homes = {Path(p).resolve() for p in Path("/usr/lib/jvm").glob("*") if Path(p).is_dir()}
    if os.environ.get("JAVA_HOME"):
        homes.add(Path(os.environ["JAVA_HOME"]).resolve())
    found = {}
    for home in homes:
        v = _jdk_version(home)
        if v is not None:
            found[home] = Jdk(home, v)
    return tuple(sorted(found.values(), key=lambda j: (-j.version, str(j.home))))


def find_jdk(min_version: int) -> Jdk | None:
    """The newest JDK with feature version >= min_version, or None."""
    for jdk in find_jdks():
        if jdk.version >= min_version:
            return jdk
    return None
