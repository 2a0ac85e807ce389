"""The load driver of a trial (loadgen/DRIVER.md): which program generates the load, and how
it is started. `http` is perfctl's asyncio generator, `rmi` the bundled Java RMI driver (its
sources live in servers/java, beside the RMI server whose remote interface it shares), and
`{cmd: ...}` any program that honours the contract.

Every driver is started the same way, `argv spec.json out_dir`, by the trial, through the
supervisor; what it writes is checked by loadgen.contract before anything reads it.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from ..errors import PerfctlError
from ..experiment.load import DriverCommand
from . import bundled

RMI_DRIVER_CLASS = "perfctl.driver.RmiDriver"
RMI_DRIVER_JDK = 17
# The rmi driver's collector (servers/java/README.md "The RMI load driver": measured against
# Parallel, G1 and ZGC on one pinned core): Serial, its survivors promoted at their first
# young collection, so the phase's long-lived objects are copied once, early in the warm-up. The environment variable replaces these, to measure the driver under another.
RMI_DRIVER_GC_FLAGS = ["-XX:+UseSerialGC", "-XX:MaxTenuringThreshold=0"]
RMI_DRIVER_GC_ENV = "PERFCTL_RMI_DRIVER_GC_FLAGS"
# The JVM's own log of its collections, in the driver's output directory: it times every
# pause to the microsecond, where the MXBean gives whole milliseconds (SelfChecks.java).
RMI_DRIVER_GC_LOG = "driver-gc.log"


def gc_log_flag(out_dir: Path) -> str:
    """-Xlog for the driver's GC log in out_dir: pauses at gc=info, each line stamped with the
    JVM's uptime in ns, one file, never rotated (the path quoted: it may hold ':' or ',')."""
    path = str(out_dir / RMI_DRIVER_GC_LOG).replace('"', '\\"')
    return f'-Xlog:gc:file="{path}":uptimenanos:filecount=0'


def can_wait(driver: str | DriverCommand) -> bool:
    """Whether the driver can be started before its spec is written (argv's when_told)."""
    return driver == "http"


def prepare(driver: str | DriverCommand) -> None:
    """Build what the driver needs (cached by source hash); PerfctlError when it cannot."""
    if driver == "rmi":
        bundled.build("java")


def argv(
    driver: str | DriverCommand, spec_path: Path, out_dir: Path, when_told: bool = False
) -> list[str]:
    """The command that runs `driver` on spec_path, writing into out_dir. when_told (the http
    driver only, see can_wait): it starts, then waits for `go` on stdin before it reads the
    spec (loadgen/__main__.py)."""
    spec, out = str(spec_path), str(out_dir)
    if driver == "http":
        return [sys.executable, "-m", "loadgen", *(["--when-told"] if when_told else []), spec, out]
    if driver == "rmi":
        jdk = bundled.find_jdk(RMI_DRIVER_JDK)
        if jdk is None:
            raise PerfctlError(
                f"load.driver rmi needs a JDK >= {RMI_DRIVER_JDK}; none under "
                "/usr/lib/jvm or $JAVA_HOME. Fix: install one (apt-get install "
                "openjdk-17-jdk-headless) or set JAVA_HOME."
            )
        gc = os.environ.get(RMI_DRIVER_GC_ENV)
        return [
            jdk.java,
            "-Xss256k",
            *(shlex.split(gc) if gc is not None else RMI_DRIVER_GC_FLAGS),
            gc_log_flag(out_dir),
            *bundled.RMI_JVM_FLAGS,
            "-cp",
            str(bundled.JAVA_CLASSES),
            RMI_DRIVER_CLASS,
            spec,
            out,
        ]
    if isinstance(driver, DriverCommand):
        # split first, then fill in: a path with spaces stays one argument
        return [a.replace("{spec}", spec).replace("{out}", out) for a in shlex.split(driver.cmd)]
    raise PerfctlError(f"unknown load driver {driver!r}")
