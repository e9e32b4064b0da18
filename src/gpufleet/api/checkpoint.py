"""Checkpoint: a saved state of a TrainingJob, read to resume it and to price its preemption."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from gpufleet.api.base import ApiModel
from gpufleet.api.resource import Resource, api_version_field, kind_field
from gpufleet.api.status import ObjectStatus

CheckpointPhase = Literal["Pending", "Complete", "Failed"]


class CheckpointSpec(ApiModel):
    job: str = Field(min_length=1, description="Name of the TrainingJob, in the same namespace.")
    step: int = Field(ge=0, description="The training step it holds.")
    uri: str = Field(min_length=1, description="Where it is stored.")
    size_bytes: int | None = Field(default=None, ge=0, description="Its size in bytes.")
    time: AwareDatetime | None = Field(default=None, description="When the state was taken.")


class CheckpointStatus(ObjectStatus):
    phase: CheckpointPhase = Field(
        default="Pending",
        description="Pending (being written), Complete (a job may resume from it) or Failed.",
    )


class Checkpoint(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["Checkpoint"] = kind_field("Checkpoint")
    spec: CheckpointSpec = Field(description="The job, step, place and size of the saved state.")
    status: CheckpointStatus = Field(default_factory=CheckpointStatus, description="Whether it is complete.")
