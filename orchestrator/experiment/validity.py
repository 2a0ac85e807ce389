"""`validity:`: when a trial's measurement cannot be trusted because the server failed it."""

from __future__ import annotations

from pydantic import Field, field_validator

from . import units
from .base import FrozenModel

DEFAULT_MAX_ERROR_RATE = 0.01


class Validity(FrozenModel):
    """max_error_rate: above this share of failed requests (connection errors, timeouts,
    responses that are not 2xx) in the measured window, a trial is invalid. Unset: 1% for
    closed, open and ramp load; no limit for burst load, whose refusals are what it measures
    (set it to judge bursts too)."""

    max_error_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        description="above this share of failed requests a trial is invalid (1%; burst: no limit)",
    )

    @field_validator("max_error_rate", mode="before")
    @classmethod
    def _fraction(cls, v):
        return units.fraction(v) if isinstance(v, str) else v

    def error_limit(self, mode: str) -> float | None:
        """The error-rate limit for a load mode (None: no limit)."""
        if self.max_error_rate is not None:
            return self.max_error_rate
        return None if mode == "burst" else DEFAULT_MAX_ERROR_RATE
