"""Status models shared by the kinds, per ARCHITECTURE.md's status contract."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from gpufleet.api.base import ApiModel
from gpufleet.api.meta import Condition, PendingReason

JobPhase = Literal["Pending", "Admitted", "Running", "Succeeded", "Failed", "Suspended"]
"""The life of a job: waiting, admitted by quota (pods being placed), running, and the two ends."""


class ObjectStatus(ApiModel):
    """Every status has conditions and, while the object waits, a structured pending reason."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation the status was written for."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="Observations about the object, one per type."
    )
    pending_reason: PendingReason | None = Field(
        default=None, description="While it waits: why, with the numbers; absent otherwise."
    )


class CheckpointRef(ApiModel):
    """The latest checkpoint a job can resume from."""

    name: str | None = Field(default=None, description="The Checkpoint object, in the job's namespace.")
    step: int | None = Field(default=None, ge=0, description="The training step it holds.")
    time: AwareDatetime | None = Field(default=None, description="When it was taken.")
    uri: str | None = Field(default=None, description="Where it is stored.")
