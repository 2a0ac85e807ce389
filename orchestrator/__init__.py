"""perfctl orchestrator: experiment files in, trials, models and plots out."""

import os

# perfctl shares its machine with the servers it measures: BLAS worker threads (started when
# numpy is imported, busy-waiting between calls) would take CPU from them and from the load
# generator, and perfctl's matrices are tiny. Must run before numpy is first imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

__version__ = "0.1.0"
