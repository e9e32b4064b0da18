"""ModelVersion: a trained model ready to serve, with its lineage back to a job and checkpoint."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpufleet.api.base import ApiModel
from gpufleet.api.resource import Resource, api_version_field, kind_field
from gpufleet.api.status import ObjectStatus


class ModelSource(ApiModel):
    training_job: str | None = Field(default=None, description="The TrainingJob that trained it.")
    checkpoint: str | None = Field(default=None, description="The Checkpoint it was exported from.")


class ModelVersionSpec(ApiModel):
    model: str = Field(min_length=1, description="The model's name, e.g. llama-70b.")
    version: str = Field(min_length=1, description="This version's name, e.g. v3.")
    uri: str = Field(min_length=1, description="Where its weights are.")
    source: ModelSource = Field(default_factory=ModelSource, description="Its lineage: job and checkpoint.")
    metrics: dict[str, float] = Field(default_factory=dict, description="Evaluation results by name.")


class ModelVersionStatus(ObjectStatus):
    phase: Literal["Pending", "Ready", "Failed"] = Field(
        default="Pending", description="Pending, Ready (may be served) or Failed."
    )


class ModelVersion(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["ModelVersion"] = kind_field("ModelVersion")
    spec: ModelVersionSpec = Field(description="The model, version, weights and lineage.")
    status: ModelVersionStatus = Field(
        default_factory=ModelVersionStatus, description="Whether it may be served."
    )
