"""The bundled servers (servers/c, servers/java, servers/python): how to build and launch them.

`build(impl)` compiles on demand and caches by a hash of the sources; `command(...)` gives the
argv that servers/PROTOCOL.md promises. This module starts no long-lived process; launching
and supervising is servers.py's job.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import PerfctlError

ROOT = Path(__file__).resolve().parent.parent
SERVERS_DIR = ROOT / "servers"
CORPUS = SERVERS_DIR / "corpus" / "sentences.tsv"

MODELS: dict[str, tuple[str, ...]] = {
    "c": ("single", "thread", "pool", "epoll"),
    "java": ("single", "thread", "pool", "virtual"),
    "python": ("async", "pool"),
}
_SOURCE_SUFFIXES = {".c", ".h", ".java", "Makefile", ".py"}


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


@lru_cache(maxsize=None)
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


def sources_hash(impl: str) -> str:
    """A hash of everything the impl's build reads; a change rebuilds."""
    h = hashlib.sha256()
    base = SERVERS_DIR / impl
    for p in sorted(base.rglob("*")):
        if "build" in p.relative_to(base).parts or not p.is_file():
            continue
        if p.suffix in _SOURCE_SUFFIXES or p.name in _SOURCE_SUFFIXES:
            h.update(str(p.relative_to(base)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def build(impl: str, variant: str = "") -> None:
    """Build a bundled server unless the cached build matches its sources.

    variant: "" for the normal build; "asan" for the C AddressSanitizer + UBSan build.
    Raises PerfctlError with the compiler's last lines when the build fails.
    """
    check_impl(impl)
    if impl == "python":
        return
    target = {"c": "all", "java": "all"}[impl] if not variant else variant
    stamp = SERVERS_DIR / impl / "build" / f".stamp-{target}"
    digest = sources_hash(impl)
    if stamp.is_file() and stamp.read_text() == digest:
        return
    proc = subprocess.run(["make", "-s", "-C", str(SERVERS_DIR / impl), target],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise PerfctlError(
            f"building the bundled {impl} server failed (make -C servers/{impl} {target}, "
            f"exit {proc.returncode}). Last lines:\n{tail}\nFix the sources or the toolchain "
            f"(gcc/make for C, a JDK for Java) and run again.")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)


def check_impl(impl: str, model: str | None = None) -> None:
    if impl not in MODELS:
        raise PerfctlError(f"unknown server impl {impl!r}; bundled servers are {', '.join(MODELS)} "
                           "(or give a `cmd:` instead of `impl:`)")
    if model is not None and model not in MODELS[impl]:
        raise PerfctlError(f"impl {impl!r} has no model {model!r}; choose one of "
                           f"{', '.join(MODELS[impl])}")


def command(impl: str, model: str, port: int, threads: int = 4, backlog: int = 128,
            buckets: int = 1024, layout: str = "flat", corpus: Path | None = None,
            seed: int = 1, variant: str = "", host: str = "127.0.0.1") -> list[str]:
    """The argv that starts one bundled server (see servers/PROTOCOL.md). Does not build."""
    check_impl(impl, model)
    flags = ["--port", str(port), "--host", host, "--model", model, "--threads", str(threads),
             "--backlog", str(backlog), "--buckets", str(buckets), "--layout", layout,
             "--corpus", str(corpus or CORPUS), "--seed", str(seed)]
    if impl == "c":
        name = "perfctl-server-asan" if variant == "asan" else "perfctl-server"
        return [str(SERVERS_DIR / "c" / "build" / name), *flags]
    if impl == "java":
        jdk = find_jdk(21 if model == "virtual" else 17)
        if jdk is None:
            have = ", ".join(f"{j.version} ({j.home})" for j in find_jdks()) or "none"
            raise PerfctlError(
                f"java model {model!r} needs a JDK >= {21 if model == 'virtual' else 17}; "
                f"found: {have}. Install one under /usr/lib/jvm or set JAVA_HOME.")
        return [jdk.java, "-Xss512k", "-cp",
                str(SERVERS_DIR / "java" / "build" / "classes"), "perfctl.server.Main", *flags]
    return [sys.executable, str(SERVERS_DIR / "python" / "server.py"), *flags]


def _main(argv: list[str]) -> int:
    """`python -m orchestrator.bundled --build-all`: build every bundled server that has sources."""
    if argv != ["--build-all"]:
        print("usage: python -m orchestrator.bundled --build-all", file=sys.stderr)
        return 2
    for impl in ("c", "java"):
        if (SERVERS_DIR / impl / "Makefile").is_file():
            try:
                build(impl)
            except PerfctlError as e:
                print(f"perfctl: {e}", file=sys.stderr)
                return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
