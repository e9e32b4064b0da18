"""Checkpoint: a saved state of a TrainingJob, read to resume it and to price its preemption."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from gpufleet.api.base import ApiModel
from gpufleet.api.resource import API_VERSION, Resource
from gpufleet.api.status import ObjectStatus

CheckpointPhase = Literal["Pending", "Complete", "Failed"]


class CheckpointSpec(ApiModel):
    job: str = Field(min_length=1, description="Name of the TrainingJob, in the same namespace.")
    step: int = Field(ge=0)
    uri: str = Field(min_length=1)
    size_bytes: int | None = Field(default=None, ge=0)
    time: AwareDatetime | None = Field(default=None, description="When the state was taken.")


class CheckpointStatus(ObjectStatus):
    phase: CheckpointPhase = "Pending"


class Checkpoint(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["Checkpoint"] = "Checkpoint"
    spec: CheckpointSpec
    status: CheckpointStatus = Field(default_factory=CheckpointStatus)
