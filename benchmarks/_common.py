"""Shared set-up for the benchmarks: nginx with one worker, bundled servers, wrk runs.

Benchmarks print ratios measured side by side in one run; they assert nothing about time.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.proc import ports, process, procfs  # noqa: E402
from orchestrator.run import bundled


def need(tool: str, package: str) -> str:
    path = shutil.which(tool) or (
        f"/usr/sbin/{tool}" if Path(f"/usr/sbin/{tool}").exists() else None
    )
    if path:
        return path
    if os.geteuid() == 0:
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", package],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        path = shutil.which(tool) or (
            f"/usr/sbin/{tool}" if Path(f"/usr/sbin/{tool}").exists() else None
        )
    if not path:
        sys.exit(f"{tool} is needed (Debian package {package}); run make setup as root")
    return path


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class Nginx:
    """nginx serving a 2-byte file, `workers` worker processes, pinned to `cpus`; with `tls`
    (an orchestrator.run.certs.RunCertificate), over HTTPS (TLS 1.3, session tickets on)."""

    def __init__(self, cpus: list[int], workers: int = 1, tls=None) -> None:
        exe = need("nginx", "nginx-light")
        self.dir = Path(tempfile.mkdtemp(prefix="perfctl-nginx-"))
        (self.dir / "www").mkdir()
        (self.dir / "logs").mkdir()
        (self.dir / "www" / "index.html").write_text("ok")
        self.port = ports.free_port()
        user = "user root;\n" if os.geteuid() == 0 else ""
        self.tls = tls
        ssl = (
            f" ssl; ssl_certificate {tls.cert_file}; ssl_certificate_key {tls.key_file};"
            " ssl_protocols TLSv1.3; ssl_session_tickets on"
            if tls
            else ""
        )
        (self.dir / "nginx.conf").write_text(f"""daemon off;
{user}worker_processes {workers};
pid {self.dir}/nginx.pid;
error_log {self.dir}/logs/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  open_file_cache max=16 inactive=600s;   # a fair rival: no open() per request
  keepalive_requests 100000000;
  client_body_temp_path {self.dir}/tmp;
  server {{ listen 127.0.0.1:{self.port}{ssl}; root {self.dir}/www;
           location / {{ try_files /index.html =404; }}
           location /mix/ {{ return 200 "ok"; }} }}  # any method: the mix rounds' endpoints
}}
""")
        self.proc = process.spawn(
            [exe, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")], cpus=cpus
        )
        wait_port(self.port)

    def url(self, path: str = "/") -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        process.terminate(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class Bundled:
    def __init__(self, impl: str, model: str, cpus: list[int], threads: int = 1, **kw) -> None:
        bundled.build(impl, model=model)
        self.port = ports.free_port()
        self.proc = process.spawn(
            bundled.command(impl, model, self.port, threads=threads, **kw), cpus=cpus
        )
        wait_port(self.port, timeout=90.0)  # Spring Boot on a busy host takes a while

    def url(self, path: str = "/") -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        process.terminate(self.proc)


def perfctl_argv(*args: str) -> list[str]:
    """The argv of the perfctl command line in this checkout (cwd ROOT, or ROOT on PYTHONPATH)."""
    return [sys.executable, "-m", "orchestrator.cli", *args]


def mark_of(pid: int) -> str:
    """The PERFCTL_SUPERVISOR value a live perfctl process gives its children: `<pid>.<start>`."""
    return f"{pid}.{procfs.start_ticks(pid)}"


def run_processes(run_dir: Path, marks: set[str] = frozenset()) -> list[str]:
    """Live processes that belong to a perfctl run, found in /proc rather than by remembered
    pids: argv naming run_dir (load generators), working directory inside it (servers), or a
    PERFCTL_SUPERVISOR value (or guardian argument) in `marks`. One "pid argv" line each."""
    run_dir = str(Path(run_dir).resolve())
    found = []
    for pid in procfs.pids():
        if pid == os.getpid() or not procfs.alive(pid):
            continue
        argv = procfs.argv(pid)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        mark = procfs.env_value(pid, "PERFCTL_SUPERVISOR")
        if (
            any(run_dir in a for a in argv)
            or cwd == run_dir
            or cwd.startswith(run_dir + "/")
            or mark in marks
            or any(m in argv for m in marks)
        ):
            found.append(f"{pid} {' '.join(argv)[:120]}")
    return found


def descendants(pid: int) -> dict[tuple[int, int], str]:
    """Every live descendant of pid, keyed (pid, start time) so that a reused pid is never
    taken for it later: {(pid, start): "pid argv"}."""
    children: dict[int, list[int]] = {}
    for p in procfs.pids():
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                raw = f.read()
            children.setdefault(int(raw[raw.rfind(b")") + 2 :].split()[1]), []).append(p)
        except (OSError, ValueError, IndexError):
            continue
    found, todo = {}, list(children.get(pid, []))
    while todo:
        p = todo.pop()
        start = procfs.start_ticks(p)
        if start is not None and procfs.alive(p):
            found[(p, start)] = f"{p} {' '.join(procfs.argv(p))[:120]}"
        todo.extend(children.get(p, []))
    return found


def still_alive(snapshot: dict[tuple[int, int], str]) -> list[str]:
    """The processes of a descendants() snapshot that still run (same pid and start time)."""
    return [text for (pid, start), text in snapshot.items() if procfs.alive(pid, start)]


def poll_until(predicate, timeout_s: float, interval_s: float = 0.05):
    """predicate()'s first truthy value within timeout_s, else its last value (bounded wait)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk(
    url: str, connections: int, duration_s: int, cpu: int, threads: int = 1, script=None
) -> dict:
    """Run wrk pinned to one CPU (with a Lua `script` when given); returns requests/s, the
    non-2xx/3xx responses and latency percentiles in ms."""
    exe = need("wrk", "wrk")
    out = subprocess.run(
        [
            "taskset",
            "-c",
            str(cpu),
            exe,
            f"-t{threads}",
            f"-c{connections}",
            f"-d{duration_s}s",
            "--latency",
            *(["-s", str(script)] if script else []),
            url,
        ],
        capture_output=True,
        text=True,
        timeout=duration_s + 30,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    pct = {}
    for q, v, u in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)", out, re.M):
        pct[f"p{q}"] = float(v) * _UNITS[u]
    return {"rps": rps, "non_2xx": int(bad.group(1)) if bad else 0, **pct, "raw": out}


def perfctl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`perfctl ARGS` with this checkout's code, output captured."""
    return subprocess.run(
        perfctl_argv(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def perfctl_load(url: str, *args: str) -> dict:
    import json

    out = perfctl("load", url, *args, "--json")
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout)


def neighbour(
    seed: int,
    cpus: list[int],
    log: str,
    stop,
    gap_s: tuple[float, float] = (4.0, 12.0),
    duty: tuple[float, float] = (0.5, 0.7),
    length_s: tuple[float, float] = (2.0, 6.0),
) -> None:
    """A seeded noisy neighbour until `stop` (an Event) is set: after a gap drawn from gap_s,
    a burst of length_s seconds spinning on a random CPU of `cpus` for a `duty` share of each
    10 ms period; one JSON line per burst into `log` (start_ns, end_ns, cpu, duty)."""
    import json
    import random

    rng = random.Random(seed)
    period = 0.010
    with open(log, "a") as f:
        while not stop.wait(rng.uniform(*gap_s)):
            cpu, share, length = rng.choice(cpus), rng.uniform(*duty), rng.uniform(*length_s)
            os.sched_setaffinity(0, {cpu})
            start = time.perf_counter_ns()
            end = start + int(length * 1e9)
            while time.perf_counter_ns() < end and not stop.is_set():
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < share * period:
                    pass
                time.sleep(max(0.0, period - (time.perf_counter() - t0)))
            burst = {"start_ns": start, "end_ns": time.perf_counter_ns(), "cpu": cpu}
            f.write(json.dumps({**burst, "duty": round(share, 3)}) + "\n")
            f.flush()
