"""perfctl load generator: asyncio + uvloop, every request kept as numpy columns.

Imports nothing from orchestrator/. The orchestrator talks to it only through files: a
LoadSpec as JSON in, requests.parquet and summary.json out (see worker.run_to_dir).
"""
from .spec import LoadSpec

__all__ = ["LoadSpec"]
