"""Queueing models for perfctl: pure numpy/scipy (pandas only in ``laws``, ``parameters``
and ``comparison``), no I/O.

Submodules:
    queues        open single-station models: mm1, mmc, mmck, mg1, mgc (Allen-Cunneen)
    sharing       processor sharing of k cores by T threads: lps (exact mean and percentiles)
    closed        exact single-class MVA with asymptotic bounds: mva
    usl           Universal Scalability Law / Amdahl fits: fit, amdahl_fit, predict
    laws          Little's law and the utilisation law as measurement checks
    stations      a server as one station by how it dispatches work; rate_for_slo, users_for_slo
    parameters    service time (Server-Timing, single-user, probe, utilization law) and its error,
                  the worker gap, the database's share and servers
    cell_station  a run's cell -> its station, every parameter's source: station_for
    predict       one cell's prediction and the other models that apply: predict_cell
    verdict       bootstrap bands, held / rejected / inconclusive, the evidence
    bottleneck    every resource's utilisation, the bottleneck, the operational laws
    assess        a cell's prediction, band, verdict and bottleneck, as table columns
    whatif        the fitted models with threads, cores, delay, rate or users changed
    comparison    the measured-vs-model table of a run: compare(), USL groups
"""

import importlib

__all__ = ["queues", "closed", "usl", "laws", "parameters", "comparison"]


def __getattr__(name: str):
    """`models.queues` and the rest are imported on first use: scipy.stats, which several of
    them import, takes ~1 s to load, and a run that only draws its plots needs none of it."""
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
