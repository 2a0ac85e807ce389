"""Load modes, one object per mode (base.Mode says what each offers).

MODES is the one table from a spec's mode name to its class; mode_for(spec) is the one place
it is read, when a spec's load is about to be generated (parallel.generate_to_dir).
"""

from ..spec import LoadSpec
from .base import Mode
from .burst import BurstMode
from .closed_loop import ClosedMode
from .open_loop import OpenMode
from .ramp import RampMode

MODES: dict[str, type[Mode]] = {m.name: m for m in (ClosedMode, OpenMode, BurstMode, RampMode)}


def mode_for(spec: LoadSpec) -> Mode:
    """The mode object that generates spec's load."""
    return MODES[spec.mode](spec)


__all__ = ["MODES", "BurstMode", "ClosedMode", "Mode", "OpenMode", "RampMode", "mode_for"]
