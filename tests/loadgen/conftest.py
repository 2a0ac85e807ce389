"""Servers for load-generator tests: the bundled Python and C servers, nginx, a stalling one."""

import os
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest
import setup_kit

from orchestrator.proc import ports, process
from orchestrator.run import bundled

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # phase_kit.py: one load phase, for the tests of this directory


def _wait_port(port: int, proc, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not listen on port {port} within {timeout} s")


class Running:
    def __init__(self, argv, cpus=None, cwd=None):
        self.port = ports.free_port()
        argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.proc = process.spawn(argv, cpus=cpus, cwd=cwd)
        _wait_port(self.port, self.proc)

    def url(self, path="/"):
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self):
        process.terminate(self.proc)


def _bundled(impl, model, **kw):
    setup_kit.build(impl)  # a failed build fails the test: make setup builds it
    return Running(bundled.command(impl, model, "{port}", **kw), cpus=[0])


@pytest.fixture(scope="module")
def py_server():
    s = _bundled("python", "async")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def c_server():
    s = _bundled("c", "epoll", threads=1)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def stall_server():
    """Answers at once, except that it freezes for 500 ms once every second."""
    s = Running([sys.executable, str(HERE / "stall_server.py"), "{port}"], cpus=[0])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def odd_server():
    """Chunked and close-delimited responses (see odd_server.py)."""
    s = Running([sys.executable, str(HERE / "odd_server.py"), "{port}"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def nginx_server(tmp_path_factory):
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    setup_kit.require(Path(exe).exists(), "nginx", "nginx-light")
    d = tmp_path_factory.mktemp("nginx")
    (d / "www").mkdir()
    (d / "www" / "index.html").write_text("ok")
    (d / "logs").mkdir()
    port = ports.free_port()
    (d / "nginx.conf").write_text(nginx_conf(d, port))
    proc = process.spawn([exe, "-p", str(d), "-c", str(d / "nginx.conf")], cpus=[0])
    _wait_port(port, proc)
    s = Running.__new__(Running)
    s.port, s.proc = port, proc
    yield s
    s.stop()


def nginx_conf(prefix: Path, port: int, workers: int = 1) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""  # pytest's tmp dirs are 0700
    return f"""daemon off;
{user}master_process on;
worker_processes {workers};
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path {prefix}/tmp;
  proxy_temp_path {prefix}/tmp;
  fastcgi_temp_path {prefix}/tmp;
  uwsgi_temp_path {prefix}/tmp;
  scgi_temp_path {prefix}/tmp;
  server {{
    listen 127.0.0.1:{port};
    root {prefix}/www;
    location / {{ try_files /index.html =404; }}
  }}
}}
"""


@pytest.fixture(scope="module")
def run_cert(tmp_path_factory):
    """A certificate made for the test (orchestrator/run/certs.py), removed after."""
    from orchestrator.run.certs import RunCertificate

    c = RunCertificate.make(tmp_path_factory.mktemp("tls"))
    yield c
    c.remove()


@pytest.fixture(scope="module", params=[("python", "async"), ("python", "pool"), ("c", "pool")])
def tls_server(run_cert, request):
    """A bundled server with TLS (Python, each model; C pool) serving HTTPS with run_cert."""
    impl, model = request.param
    setup_kit.build(impl)
    argv = bundled.command(impl, model, "{port}", threads=2)
    argv += ["--tls-cert", str(run_cert.cert_file), "--tls-key", str(run_cert.key_file)]
    s = Running(argv, cpus=[0])
    yield s
    s.stop()
