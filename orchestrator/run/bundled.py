"""The bundled servers (servers/c, servers/java, servers/python): how to build and launch them.

`build(impl)` compiles on demand, cached by a hash of the sources (build.py); `command(...)`
gives the argv that servers/PROTOCOL.md promises. This module starts no long-lived process;
launching is server.py's job. Which concurrency models exist is data (experiment/catalogue.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.catalogue import RMI_MODELS, STACK_MODELS, unknown_impl_or_model
from ..proc.build import ROOT, SOURCE_SUFFIXES, find_jdk, find_jdks, make_cached

SERVERS_DIR = ROOT / "servers"
CORPUS = SERVERS_DIR / "corpus" / "sentences.tsv"
JAVA_CLASSES = SERVERS_DIR / "java" / "build" / "classes"
# The Maven build of the servers on real stacks copies every runtime dependency here, the
# PostgreSQL JDBC driver among them; the plain Java server (javac only) takes that jar from here
# for /db (servers/java/src/perfctl/server/DbPool.java).
STACKS_LIB = SERVERS_DIR / "java" / "stacks" / "build" / "lib"
# The RMI server and driver build remote references with the JDK's own classes (RmiServer.java,
# Client.java), which the java.rmi module does not export.
RMI_JVM_FLAGS = [
    f"--add-exports=java.rmi/sun.rmi.{p}=ALL-UNNAMED"
    for p in ("server", "transport", "transport.tcp")
]


def build(impl: str, variant: str = "", model: str | None = None, db: bool = False) -> None:
    """Build a bundled server unless the cached build matches its sources.

    variant: "" for the normal build; "asan" for the C AddressSanitizer + UBSan build.
    model: a model on a real stack (servlet, spring) builds those with Maven instead
    (servers/java/stacks; the first build downloads into ~/.m2, later ones run offline).
    db: the server will get `--db`; a plain Java model then also needs the PostgreSQL JDBC
    driver jar, which the (cached) stacks build provides (jdbc_driver_jar).
    Raises PerfctlError with the compiler's last lines when the build fails.
    """
    check_impl(impl, model)
    if impl == "python":
        return
    if model in STACK_MODELS.get(impl, ()) or (impl == "java" and db):
        make_cached(
            SERVERS_DIR / impl,
            "stacks",
            f"the {impl} servers on real stacks (Maven)",
            "install maven and a JDK >= 17 (make setup does), check that Maven Central "
            "is reachable for the first build, and run again.",
            suffixes=SOURCE_SUFFIXES + (".xml",),
            timeout_s=1800.0,
        )
        if model in STACK_MODELS.get(impl, ()):
            return
    make_cached(
        SERVERS_DIR / impl,
        variant or "all",
        f"the bundled {impl} server",
        "fix the sources or the toolchain (gcc/make for C, a JDK for Java) and run again.",
    )


def jdbc_driver_jar() -> Path | None:
    """The PostgreSQL JDBC driver jar of the stacks build (STACKS_LIB), or None before it ran."""
    jars = sorted(STACKS_LIB.glob("postgresql-*.jar"))
    return jars[-1] if jars else None


def check_impl(impl: str, model: str | None = None) -> None:
    """PerfctlError unless impl (and model, when given) names a bundled server."""
    problem = unknown_impl_or_model(impl, model)
    if problem:
        raise PerfctlError(problem)


def command(
    impl: str,
    model: str,
    port: int,
    threads: int = 4,
    backlog: int = 128,
    buckets: int = 1024,
    layout: str = "flat",
    corpus: Path | None = None,
    seed: int = 1,
    variant: str = "",
    host: str = "127.0.0.1",
    db: str | None = None,
    db_pool: int | None = None,
) -> list[str]:
    """The argv that starts one bundled server (see servers/PROTOCOL.md). Does not build.
    db: the PostgreSQL URI /db uses (`--db`), e.g. a service's dsn; db_pool: `--db-pool`."""
    check_impl(impl, model)
    flags = [
        "--port",
        str(port),
        "--host",
        host,
        "--model",
        model,
        "--threads",
        str(threads),
        "--backlog",
        str(backlog),
        "--buckets",
        str(buckets),
        "--layout",
        layout,
        "--corpus",
        str(corpus or CORPUS),
        "--seed",
        str(seed),
    ]
    if db:
        flags += ["--db", db]
    if db_pool:
        flags += ["--db-pool", str(db_pool)]
    if impl == "c":
        name = "perfctl-server-asan" if variant == "asan" else "perfctl-server"
        return [str(SERVERS_DIR / "c" / "build" / name), *flags]
    if impl == "java":
        jdk = find_jdk(21 if model == "virtual" else 17)
        if jdk is None:
            have = ", ".join(f"{j.version} ({j.home})" for j in find_jdks()) or "none"
            raise PerfctlError(
                f"java model {model!r} needs a JDK >= {21 if model == 'virtual' else 17}; "
                f"found: {have}. Install one under /usr/lib/jvm or set JAVA_HOME."
            )
        if model in STACK_MODELS["java"]:
            stacks = SERVERS_DIR / "java" / "stacks" / "build"
            main = (
                "perfctl.server.ServletMain" if model == "servlet" else "perfctl.server.SpringMain"
            )
            return [jdk.java, "-cp", f"{stacks / 'classes'}:{stacks / 'lib'}/*", main, *flags]
        extra = RMI_JVM_FLAGS if model in RMI_MODELS else []
        jar = jdbc_driver_jar()  # /db's JDBC driver, whenever the stacks build left it
        if db and jar is None:
            raise PerfctlError(
                f"java model {model!r} with `db:` needs the PostgreSQL JDBC driver, which the "
                f"build of the servers on real stacks puts in {STACKS_LIB}, and it is not "
                "there. Fix: run `make -C servers/java stacks` (make setup does), then run again."
            )
        classpath = str(JAVA_CLASSES) + (f":{jar}" if jar else "")
        return [jdk.java, "-Xss512k", *extra, "-cp", classpath, "perfctl.server.Main", *flags]
    return [sys.executable, str(SERVERS_DIR / "python" / "server.py"), *flags]


def _main(argv: list[str]) -> int:
    """`python -m orchestrator.run.bundled --build-all`: build every bundled server that has sources."""
    if argv != ["--build-all"]:
        print("usage: python -m orchestrator.run.bundled --build-all", file=sys.stderr)
        return 2
    for impl, model in (("c", None), ("java", None), ("java", "servlet")):
        if (SERVERS_DIR / impl / "Makefile").is_file():
            try:
                build(impl, model=model)
            except PerfctlError as e:
                print(f"perfctl: {e}", file=sys.stderr)
                return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
