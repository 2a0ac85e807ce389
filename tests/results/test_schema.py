"""results/schema.py owns the trial columns: their groups, order on write, renames on read."""

import pandas as pd

from orchestrator.results import schema


def test_groups_do_not_overlap():
    groups = [
        schema.IDENTITY_COLUMNS,
        schema.CONFIGURATION_COLUMNS,
        schema.MEASUREMENT_COLUMNS,
        schema.SELF_CHECK_COLUMNS,
    ]
    seen = [c for g in groups for c in g]
    assert len(seen) == len(set(seen))


def test_written_order_is_identity_axes_configuration_measurement_then_self_check():
    row = {
        "valid": True,
        "latency_p99_ms": 1.0,
        "extra": 3,
        "window_s": 5.0,
        "rate": 100,
        "trial": 1,
        "cell_id": "a",
        "invalid_reasons": "",
    }
    df = schema.order_columns(pd.DataFrame([row]), axes=["rate"])
    assert list(df.columns) == [
        "cell_id",
        "trial",
        "rate",
        "window_s",
        "latency_p99_ms",
        "extra",
        "valid",
        "invalid_reasons",
    ]


def test_upgrade_renames_old_columns_but_never_overwrites_a_new_one():
    df = pd.DataFrame([{"duration_s": 5.0, "server_model": "pool", "window_s": 4.0}])
    up = schema.upgrade(df)
    assert up["window_s"].iloc[0] == 4.0 and "duration_s" in up.columns
    assert up["concurrency_model"].iloc[0] == "pool"


def test_configuration_columns_are_the_axes_and_the_known_configuration():
    df = pd.DataFrame(
        [
            {
                "server": "py",
                "rate": 1,
                "concurrency_model": "async",
                "latency_p99_ms": 2.0,
                "startup_s": 0.3,
            }
        ]
    )
    assert schema.configuration_columns(df, ["rate"]) == ["server", "rate", "concurrency_model"]
