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

from orchestrator.run import bundled, ports, process  # noqa: E402


def need(tool: str, package: str) -> str:
    path = shutil.which(tool) or (f"/usr/sbin/{tool}" if Path(f"/usr/sbin/{tool}").exists() else None)
    if path:
        return path
    if os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", package], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        path = shutil.which(tool) or (f"/usr/sbin/{tool}" if Path(f"/usr/sbin/{tool}").exists() else None)
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
    """nginx serving a 2-byte file, `workers` worker processes, pinned to `cpus`."""

    def __init__(self, cpus: list[int], workers: int = 1) -> None:
        exe = need("nginx", "nginx-light")
        self.dir = Path(tempfile.mkdtemp(prefix="perfctl-nginx-"))
        (self.dir / "www").mkdir()
        (self.dir / "logs").mkdir()
        (self.dir / "www" / "index.html").write_text("ok")
        self.port = ports.free_port()
        user = "user root;\n" if os.geteuid() == 0 else ""
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
  server {{ listen 127.0.0.1:{self.port}; root {self.dir}/www;
           location / {{ try_files /index.html =404; }} }}
}}
""")
        self.proc = process.spawn([exe, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")],
                                  cpus=cpus)
        wait_port(self.port)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        process.terminate(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class Bundled:
    def __init__(self, impl: str, model: str, cpus: list[int], threads: int = 1, **kw) -> None:
        bundled.build(impl)
        self.port = ports.free_port()
        self.proc = process.spawn(bundled.command(impl, model, self.port, threads=threads, **kw),
                                  cpus=cpus)
        wait_port(self.port)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        process.terminate(self.proc)


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk(url: str, connections: int, duration_s: int, cpu: int, threads: int = 1) -> dict:
    """Run wrk pinned to one CPU; returns requests/s and latency percentiles in ms."""
    exe = need("wrk", "wrk")
    out = subprocess.run(["taskset", "-c", str(cpu), exe, f"-t{threads}", f"-c{connections}",
                          f"-d{duration_s}s", "--latency", url], capture_output=True, text=True,
                         timeout=duration_s + 30).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    pct = {}
    for q, v, u in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)", out, re.M):
        pct[f"p{q}"] = float(v) * _UNITS[u]
    return {"rps": rps, **pct, "raw": out}


def perfctl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`perfctl ARGS` with this checkout's code, output captured."""
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def perfctl_load(url: str, *args: str) -> dict:
    import json
    out = perfctl("load", url, *args, "--json")
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout)
