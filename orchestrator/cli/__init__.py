"""Every `perfctl` command and its console output. main.py registers the commands."""

from .main import app, main

__all__ = ["app", "main"]
