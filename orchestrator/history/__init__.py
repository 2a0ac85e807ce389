"""The performance history: every finished run remembered in one store, and the change points of
each series found there.

    store.py        where the history lives (SQLite file or PostgreSQL), opening it, adding runs
    migrations.py   the store's schema, one numbered step at a time (schema_version)
    record.py       a run directory as the rows the store keeps (run, trials, capacities, labels)
    add.py          adding runs: after `perfctl run` (a failure is a warning), and import
    changepoints.py E-divisive means on trial-level data: where a series' level moved
    trend.py        the series of a store, their change points, and the verdict of `history check`
    figure.py       a series with its change points and intervals, as a PNG

The run directory stays the truth: the store is an index of what runs measured, and
`perfctl history import` rebuilds it from run directories at any time. Nothing here is
imported when the CLI starts (pandas, numpy and the database drivers load on use).
"""
