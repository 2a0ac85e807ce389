"""Which view a run shows where: the progress bar and live line on a terminal, the same redrawn
in place in a Jupyter cell (through an IPython display handle, no ipywidgets), plain lines
elsewhere or when quiet."""

import io

import pytest
from rich.console import Console

from orchestrator.api import display
from orchestrator.measure.live import LiveSecond

SECOND = LiveSecond(
    second=3,
    phase="measure",
    ok=1020,
    errors=0,
    p50_ms=0.412,
    p99_ms=2.31,
    lateness_p99_ms=0.051,
    server_cpu_pct=97.0,
    noisy="",
)


@pytest.mark.parametrize(
    "console,quiet,view,per_second",
    [
        (dict(force_jupyter=True), False, display.NotebookDisplay, None),
        (dict(force_jupyter=True), True, display.PlainDisplay, False),
        (dict(force_terminal=True, force_jupyter=False), False, display.LiveDisplay, None),
        (dict(file=io.StringIO(), force_jupyter=False), False, display.PlainDisplay, True),
        (dict(file=io.StringIO(), force_jupyter=False), True, display.PlainDisplay, False),
    ],
)
def test_make_picks_the_view_for_the_console(console, quiet, view, per_second):
    shown = display.make(Console(**console), 4, 0, quiet)
    assert type(shown) is view
    if per_second is not None:
        assert shown.per_second is per_second


class Handle:
    """What IPython's display(..., display_id=True) returns: update() redraws the output."""

    def __init__(self, first: dict) -> None:
        self.shown = [first]

    def update(self, bundle: dict, raw: bool = False) -> None:
        assert raw
        self.shown.append(bundle)


def test_the_notebook_view_redraws_one_output_with_the_bar_and_the_live_line(monkeypatch):
    import IPython.display

    handles = []

    def fake_display(bundle, raw=False, display_id=False):
        assert raw and display_id
        handles.append(Handle(bundle))
        return handles[-1]

    monkeypatch.setattr(IPython.display, "display", fake_display)
    console = Console(force_jupyter=True, width=100)
    with display.NotebookDisplay(console, 2, 0) as shown:
        shown.on_start("server=py, connections=4", 1)
        shown.on_second(SECOND)
        during = handles[0].shown[-1]
        shown.on_trial({"valid": True})
    (handle,) = handles  # one output, redrawn: never a new one per second
    assert "server=py, connections=4 #1" in during["text/plain"]
    assert "0/2" in during["text/plain"] and "ETA" in during["text/plain"]
    assert SECOND.line() in during["text/plain"]
    assert during["text/html"].startswith("<pre") and "measure 3s quiet" in during["text/html"]
    final = handle.shown[-1]["text/plain"]
    assert "1/2" in final and "measure 3s" not in final  # the live line goes with the trial
