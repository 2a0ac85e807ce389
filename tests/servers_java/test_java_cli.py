"""Build, command line and start-up of the bundled Java server."""

from __future__ import annotations

import struct
import subprocess
import time

import pytest
import setup_kit


def _run(jkit, *flags, java=None, timeout=30):
    argv = [
        java or jkit.newest_java(),
        "-Xss512k",
        "-cp",
        str(jkit.CLASSES),
        "perfctl.server.Main",
        *flags,
    ]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def test_java_build_is_java17_bytecode(jkit):
    # `make all` again is a no-op; the classes target Java 17 (class file major version 61)
    proc = subprocess.run(
        ["make", "-s", "-C", str(jkit.JAVA_DIR), "all"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr
    head = (jkit.CLASSES / "perfctl" / "server" / "Main.class").read_bytes()[:8]
    assert head[:4] == b"\xca\xfe\xba\xbe"
    assert struct.unpack(">H", head[6:8])[0] == 61
    outside = [
        p
        for p in jkit.JAVA_DIR.rglob("*.class")
        if "build" not in p.relative_to(jkit.JAVA_DIR).parts
    ]
    assert not outside


def test_java_bundled_command_starts_it(jkit):
    """The argv orchestrator/bundled.py builds runs the server (newest JDK, -Xss512k)."""
    from orchestrator.run import bundled

    bundled.build("java")
    argv = bundled.command("java", "pool", 0, threads=3, backlog=64)
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        line = proc.stdout.readline()
        m = jkit.LISTEN_RE.match(line.strip())
        assert m and m.group(2) == "pool" and m.group(3) == "3" and m.group(4) == "64", line
        assert int(m.group(1)) > 0
        proc.terminate()
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize(
    "flags,names",
    [
        ([], "--port"),
        (["--port", "x"], "--port"),
        (["--port", "70000"], "--port"),
        (["--port"], "--port"),
        (["--port", "0", "--model", "epoll"], "--model"),
        (["--port", "0", "--threads", "0"], "--threads"),
        (["--port", "0", "--backlog", "-1"], "--backlog"),
        (["--port", "0", "--buckets", "many"], "--buckets"),
        (["--port", "0", "--layout", "tree"], "--layout"),
        (["--port", "0", "--corpus", "/nonexistent/sentences.tsv"], "--corpus"),
        (["--port", "0", "--seed", "1.5"], "--seed"),
        (["--port", "0", "--bogus", "1"], "--bogus"),
    ],
)
def test_java_bad_flags_exit_2(jkit, flags, names):
    p = _run(jkit, *flags)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0], p.stderr


def require_jdk17(jkit) -> None:
    """The JDK 17 these tests run on is make setup's: missing is a failure."""
    setup_kit.require(
        jkit.JDK17_JAVA.exists(), f"the JDK 17 java ({jkit.JDK17_JAVA})", "openjdk-17-jdk-headless"
    )


def test_java_virtual_needs_jdk21(jkit):
    require_jdk17(jkit)
    t = time.monotonic()
    p = _run(jkit, "--port", "0", "--model", "virtual", java=str(jkit.JDK17_JAVA))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "JDK >= 21" in lines[0], p.stderr
    assert time.monotonic() - t < 20


@pytest.mark.parametrize("model", ["single", "thread", "pool"])
def test_java_runs_on_jdk17(jkit, model):
    require_jdk17(jkit)
    with jkit.JavaServer(model, java=str(jkit.JDK17_JAVA)) as srv:
        assert srv.get("/work?spin_us=10").status == 200
        assert srv.terminate() == 0


def test_java_listening_line_port_and_flags(jkit):
    with jkit.JavaServer("thread", "--threads", "7", "--backlog", "33", "--seed", "42") as srv:
        m = jkit.LISTEN_RE.match(srv.line)
        assert m.groups() == (str(srv.port), "thread", "7", "33")
