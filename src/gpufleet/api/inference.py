"""InferenceService: an autoscaled set of model-serving replicas, spread over nodes by default."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.fields import PriorityClassName, checked_on_write
from gpufleet.api.requests import PodRequest, check_template_gpus
from gpufleet.api.resource import API_VERSION, Resource
from gpufleet.api.status import ObjectStatus
from gpufleet.api.training import DEFAULT_QUEUE

ServicePhase = Literal["Pending", "Running", "Failed"]


class ReplicaRange(ApiModel):
    min: int = Field(default=1, ge=0)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _min_at_most_max(self) -> ReplicaRange:
        if self.min > self.max:
            raise field_error("min", f"must be <= max ({self.min} > {self.max})")
        return self


class ServiceAutoscaling(ApiModel):
    """Scale on load per replica and/or p99 latency; `predictive` scales ahead of forecast load."""

    target_requests_per_replica: float | None = Field(default=None, gt=0)
    target_latency_p99_ms: float | None = Field(default=None, gt=0)
    predictive: bool = False


class Rollout(ApiModel):
    max_surge: int = Field(default=1, ge=0)
    max_unavailable: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _can_progress(self) -> Rollout:
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise field_error("maxSurge", "maxSurge and maxUnavailable cannot both be 0")
        return self


class InferenceServiceSpec(ApiModel):
    queue: str = DEFAULT_QUEUE
    priority_class: PriorityClassName | None = None
    model_version: str | None = None
    replicas: ReplicaRange
    replica: PodRequest
    autoscaling: ServiceAutoscaling = Field(default_factory=ServiceAutoscaling)
    rollout: Rollout = Field(default_factory=Rollout)
    preemptible: bool = False

    @model_validator(mode="after")
    def _template_asks_for_no_other_gpus(self, info: ValidationInfo) -> InferenceServiceSpec:
        if checked_on_write(info):
            check_template_gpus(self.replica, "replica")
        return self


class InferenceServiceStatus(ObjectStatus):
    phase: ServicePhase = "Pending"
    desired_replicas: int = Field(default=0, ge=0)
    ready_replicas: int = Field(default=0, ge=0)


class InferenceService(Resource):
    """Serving replicas of a model version (namespaced)."""

    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["InferenceService"] = "InferenceService"
    spec: InferenceServiceSpec
    status: InferenceServiceStatus = Field(default_factory=InferenceServiceStatus)
