"""The `services:` of an experiment at run time: each service is started before the trials of
its scope (`run` or `trial`) and stopped, with its data removed, after them (ServiceSet). Its
kind says what runs it: `postgresql`, a PostgreSQL server of its own (postgres.py, which says
how it is started, reached, secured and cleaned up).
"""

from __future__ import annotations

from pathlib import Path

from ..experiment.services import PostgresService, ServiceConfig
from .postgres import PostgresRunner

RUNNERS = {PostgresService: PostgresRunner}


class ServiceSet:
    """Every service of a plan. start(scope, dir) starts those of one scope (run | trial);
    stop(scope) stops them. endpoints() feeds `{services.NAME.FIELD}`."""

    def __init__(self, configs: dict[str, ServiceConfig], source: str) -> None:
        self.configs = configs
        self.source = source
        self.running: dict[str, PostgresRunner] = {}

    def __bool__(self) -> bool:
        return bool(self.configs)

    def start(self, scope: str, base_dir: Path) -> None:
        for name, config in self.configs.items():
            if name in self.running and not self.running[name].alive():
                self.running.pop(name).stop()  # died in an earlier trial: anew
            if config.scope == scope and name not in self.running:
                runner = RUNNERS[type(config)](name, config, self.source)
                self.running[name] = runner  # stop() reaches it even if start fails
                runner.start(base_dir)

    def stop(self, scope: str | None = None) -> None:
        for name in list(self.running):
            if scope is None or self.configs[name].scope == scope:
                self.running.pop(name).stop()

    def endpoints(self) -> dict[str, dict[str, str]]:
        return {name: r.endpoints for name, r in self.running.items()}

    def pids(self) -> dict[str, int]:
        return {name: r.pid for name, r in self.running.items() if r.pid is not None}

    def dead(self) -> list[str]:
        """Reasons for every running service whose postmaster has exited."""
        out = []
        for name, r in self.running.items():
            if r.proc is not None and r.proc.poll() is not None:
                out.append(
                    f"service {name} (postgresql) stopped during the trial (exit "
                    f"{r.proc.returncode}); see {r.log_path}"
                )
        return out
