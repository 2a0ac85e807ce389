"""Every `perfctl` command: its flags, its help and its console output. main.py registers the
commands; the work of run, load and compare is the Python API's (orchestrator/api/), which the
commands call. A module here imports at its top only what `perfctl --help` needs: the rest
loads inside the command that uses it (tests/cli/test_light_commands.py guards it)."""

from .main import app, main

__all__ = ["app", "main"]
