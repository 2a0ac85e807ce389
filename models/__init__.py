"""Queueing models for perfctl: pure numpy/scipy (pandas only in ``laws``, ``estimate``
and ``comparison``), no I/O.

Submodules:
    queues    open single-station models: mm1, mmc, mmck, mg1, mgc (Allen-Cunneen)
    closed    exact single-class MVA with asymptotic bounds: mva
    usl       Universal Scalability Law / Amdahl fits: fit, amdahl_fit, predict
    laws      Little's law and the utilisation law as measurement checks
    estimate    service time, servers and capacity from a run's DataFrames; per-cell predictions
    comparison  the measured-vs-model table of a run: compare(), USL groups
"""

from . import closed, comparison, estimate, laws, queues, usl

__all__ = ["queues", "closed", "usl", "laws", "estimate", "comparison"]
