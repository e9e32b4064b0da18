"""ModelVersion: a trained model ready to serve, with its lineage back to a job and checkpoint."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpufleet.api.base import ApiModel
from gpufleet.api.resource import API_VERSION, Resource
from gpufleet.api.status import ObjectStatus


class ModelSource(ApiModel):
    training_job: str | None = None
    checkpoint: str | None = None


class ModelVersionSpec(ApiModel):
    model: str = Field(min_length=1)
    version: str = Field(min_length=1)
    uri: str = Field(min_length=1)
    source: ModelSource = Field(default_factory=ModelSource)
    metrics: dict[str, float] = Field(default_factory=dict)


class ModelVersionStatus(ObjectStatus):
    phase: Literal["Pending", "Ready", "Failed"] = "Pending"


class ModelVersion(Resource):
    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["ModelVersion"] = "ModelVersion"
    spec: ModelVersionSpec
    status: ModelVersionStatus = Field(default_factory=ModelVersionStatus)
