"""What every experiment model shares: frozen, no unknown keys, unit strings parsed on input."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from . import units


def _duration(v: Any) -> float:
    return units.duration_s(v)


Seconds = Annotated[float, BeforeValidator(_duration)]


class FrozenModel(BaseModel):
    """Validated once, never changed; YAML keys are the field aliases (`duration` for
    `duration_s`), and the field names work too."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
