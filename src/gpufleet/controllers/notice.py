"""An Event a shared decision asks its world to record (each world records it its own way: the
embedded store's Events, core/v1 Events through the API)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Notice:
    reason: str
    message: str
    type: Literal["Normal", "Warning"] = "Normal"
