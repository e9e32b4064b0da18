"""Status models shared by the kinds, per ARCHITECTURE.md's status contract."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from gpufleet.api.base import ApiModel
from gpufleet.api.meta import Condition, PendingReason

JobPhase = Literal["Pending", "Admitted", "Running", "Succeeded", "Failed"]
"""The life of a job: waiting, admitted by quota (pods being placed), running, and the two ends."""


class ObjectStatus(ApiModel):
    """Every status has conditions and, while the object waits, a structured pending reason."""

    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] = Field(default_factory=list)
    pending_reason: PendingReason | None = None


class CheckpointRef(ApiModel):
    """The latest checkpoint a job can resume from."""

    name: str | None = None
    step: int | None = Field(default=None, ge=0)
    time: AwareDatetime | None = None
    uri: str | None = None
