"""The capacity search (`search:` in the experiment file): per cell, the largest load that
meets an SLO, with its interval, from few probes placed where a fitted queueing model says
the answer is.

    cell_search.py        one cell's probes: what comes next and what each outcome means
    probe_checks.py       what a probe's row says against counting it (validity, noise, trend)
    capacity_estimate.py  the capacity, its interval and the next probe's level (pure)
    capacity_entry.py     a cell's entry of capacity.json, from its CellSearch
    station.py            the queueing station fitted from the set-up probes (the swap point)
    readings.py           what a probe's trial directory says beyond its trials.csv row
    execute.py            the driver: probes through run/trial.py, trials.csv, capacity.json

Layering: search sits above run (it drives trials) and uses models (the stations); cli is
the only layer that imports it.
"""
