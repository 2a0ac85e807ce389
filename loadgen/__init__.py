"""perfctl load generator: asyncio + uvloop, every request recorded as numpy columns in
chunks, each chunk summarised (digest.py) and kept on disk as `records` says.

Imports nothing from orchestrator/. The orchestrator talks to it only through files: a
LoadSpec as JSON in; summary.json, digest.json, latency.hlog and requests.parquet out (see
parallel.generate_to_dir).
"""

import os

# One BLAS thread: numpy's OpenBLAS workers busy-wait between calls and would take CPU
# from the load loop (set before numpy is first imported; orchestrator/ does the same).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from .spec import LoadSpec  # noqa: E402

__all__ = ["LoadSpec", "generate_to_dir"]


def __getattr__(name: str):
    """`loadgen.generate_to_dir` on first use: parallel.py loads numpy, pyarrow and uvloop,
    which `perfctl plan` (reading LoadSpec's helpers through loadgen.spec) never needs."""
    if name == "generate_to_dir":
        from .parallel import generate_to_dir  # numpy, pyarrow, uvloop: a load run only

        return generate_to_dir
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
